// pidfd helpers: signal a process by a handle that cannot be redirected to a
// new process after PID reuse. Verification that the handle names the process
// we scanned (start time) lives with the /proc parsers (proc/identity.hpp).
#pragma once

#include <sys/types.h>

#include "sys/error.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::sys {

// pidfd_open(2). ESRCH when the process is gone.
Result<UniqueFd> pidfd_open(pid_t pid);
// pidfd_send_signal(2). ESRCH when the process has exited (even if unreaped).
Status pidfd_send_signal(int pidfd, int signo);
// Blocks until the process behind `pidfd` exits or `timeout_ms` passes (poll on the pidfd).
// Returns true when it exited.
Result<bool> pidfd_wait_exit(int pidfd, int timeout_ms);

}  // namespace gpureap::sys
