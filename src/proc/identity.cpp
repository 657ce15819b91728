#include "proc/identity.hpp"

#include <poll.h>

#include <cerrno>
#include <string>

#include "proc/parse.hpp"
#include "sys/pidfd.hpp"

namespace gpureap::proc {

sys::Result<sys::UniqueFd> open_verified_pidfd(const sys::HostRoot& root, pid_t pid,
                                               std::uint64_t expected_start_time) {
  const std::string who = "pid " + std::to_string(pid);
  if (pid <= 0) return sys::Error{EINVAL, who + ": not a process id"};
  // Handle first: whatever we verify afterwards is then about this very process.
  auto pidfd = sys::pidfd_open(pid);
  if (!pidfd) return pidfd.error();

  auto text = root.read_file("proc/" + std::to_string(pid) + "/stat");
  if (!text) return text.error();
  auto st = parse_stat(*text);
  if (!st || st->pid != pid) return sys::Error{EBADMSG, who + ": unparsable stat"};
  if (st->start_time != expected_start_time) {
    return sys::Error{ESTALE, who + ": start time " + std::to_string(st->start_time) + " != expected " +
                                  std::to_string(expected_start_time) + " (PID reused)"};
  }

  // If the pidfd's process had exited before the stat read, the pid could have
  // been reused in between and the stat above describe another process.
  // Still running now means it was running during the read: the match holds.
  pollfd pfd{pidfd->get(), POLLIN, 0};
  int n = 0;
  do {
    n = ::poll(&pfd, 1, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) return sys::errno_error(errno, who + ": poll pidfd");
  if (n > 0) return sys::Error{ESRCH, who + ": exited"};
  return std::move(pidfd).value();
}

}  // namespace gpureap::proc
