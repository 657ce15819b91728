// Positive identification before any action: a pid alone can be reused by an
// unrelated process between the scan and the signal. A pidfd cannot be
// redirected, and the start time (stat field 22) tells whether the process
// behind the pid is still the one the scan saw.
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "sys/error.hpp"
#include "sys/host_root.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::proc {

// pidfd_open(pid), then re-reads <root>/proc/<pid>/stat and compares its start
// time with `expected_start_time`, then checks the pidfd's process has not
// exited meanwhile (so the stat we read cannot belong to a successor).
// Errors: ESRCH when the process is gone or has exited (zombies included: there
// is nothing left to signal), ESTALE when the start time differs (PID reused),
// EBADMSG when stat cannot be parsed, else the failing call's errno.
// <root>/proc must show the caller's PID namespace (hostPID on a node), since
// pidfd_open resolves pids in the caller's namespace.
sys::Result<sys::UniqueFd> open_verified_pidfd(const sys::HostRoot& root, pid_t pid,
                                               std::uint64_t expected_start_time);

}  // namespace gpureap::proc
