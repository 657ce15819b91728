// argv and the initial environment of another process, copied from its
// memory: what /proc/PID/cmdline and environ read, with one process_vm_readv
// for both instead of an open, a read and a close for each file.
#pragma once

#include <sys/types.h>

#include <string>

#include "proc/kernel_fds.hpp"

namespace gpureap::proc {

enum class AreaCopy {
  copied,   // `out` holds what was asked
  refused,  // EPERM or ENOSYS: ptrace policy, a security module, seccomp
  // No memory now (ESRCH: exited, or a zombie since), a part unmapped,
  // implausible areas: the files tell which.
  unavailable,
};

// Copies into `out` the argument area (when `args`) followed by the
// environment area (when `env`) of `pid`. Needs ptrace access in attach
// mode, stricter than the files' read mode: a refusal is answered by reading
// the files, which then say what they always say. The kernel pins the pages
// it copies from, and a page still shared copy-on-write with the parent it
// was forked from is first given its own copy (seen as do_wp_page under
// pin_user_pages_remote): once per process, the one or two stack pages that
// hold these areas, charged to its cgroup. The files read without pinning.
AreaCopy copy_areas(pid_t pid, const MemoryAreas& areas, bool args, bool env, std::string& out);

}  // namespace gpureap::proc
