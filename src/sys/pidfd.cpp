#include "sys/pidfd.hpp"

#include <poll.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <string>

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif

namespace gpureap::sys {

Result<UniqueFd> pidfd_open(pid_t pid) {
  long fd = ::syscall(SYS_pidfd_open, pid, 0);
  if (fd < 0) return errno_error(errno, "pidfd_open " + std::to_string(pid));
  return UniqueFd(static_cast<int>(fd));
}

Status pidfd_send_signal(int pidfd, int signo) {
  if (::syscall(SYS_pidfd_send_signal, pidfd, signo, nullptr, 0) < 0) {
    return errno_error(errno, "pidfd_send_signal " + std::to_string(signo));
  }
  return Ok{};
}

Result<bool> pidfd_wait_exit(int pidfd, int timeout_ms) {
  pollfd p{pidfd, POLLIN, 0};
  for (;;) {
    int n = ::poll(&p, 1, timeout_ms);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error(errno, "poll pidfd");
    }
    return n > 0;
  }
}

}  // namespace gpureap::sys
