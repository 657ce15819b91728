// Reading our own identity and other processes' PID namespaces under the root.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string_view>

#include "prestop/select.hpp"
#include "sys/error.hpp"
#include "sys/host_root.hpp"

namespace gpureap::prestop {

// "pid:[4026531836]" -> 4026531836 (the text of a /proc/<pid>/ns/pid link).
std::optional<std::uint64_t> parse_ns_link(std::string_view text, std::string_view kind = "pid");

// Our pid as <root>/proc shows it, our PID-namespace inode, our container (from
// our own cgroup). Fails (EXDEV) when <root>/proc is not our PID namespace's
// /proc: pids read there would not be the pids pidfd_open resolves, and PID 1
// there would not be our PID 1.
sys::Result<SelfIdentity> read_self_identity(const sys::HostRoot& root);

// readlink <root>/proc/<pid>/ns/pid, parsed; nullopt when unreadable or gone.
std::optional<std::uint64_t> read_pid_namespace(const sys::HostRoot& root, pid_t pid);

}  // namespace gpureap::prestop
