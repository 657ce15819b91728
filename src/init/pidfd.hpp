// pidfd_open / pidfd_send_signal through syscall(2): glibc 2.36's
// <sys/pidfd.h> lacks extern "C", so its declarations do not link from C++.
#pragma once

#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <csignal>

namespace gpureap::init {

inline int pidfd_open(pid_t pid) { return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0U)); }

inline int pidfd_send_signal(int pidfd, int sig) {
  return static_cast<int>(::syscall(SYS_pidfd_send_signal, pidfd, sig, static_cast<siginfo_t*>(nullptr), 0U));
}

}  // namespace gpureap::init
