// cgroup_layouts: which container (if any) a cgroup path names. Owns the table
// of known runtime/driver layouts and the choice of which /proc/<pid>/cgroup
// line to trust. Pure functions over strings: no I/O, so the fuzz target and
// the unit tests drive them with captured lines.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "container/container_ref.hpp"
#include "proc/process.hpp"

namespace gpureap::container {

// True for a runtime container ID: exactly 64 lower-case hex digits. Runtimes
// always print lower case, so upper case is treated as "not an ID" rather than
// normalised (it would otherwise name a container no runtime file matches).
[[nodiscard]] bool is_container_id(std::string_view s);

// Parses one cgroup path (the third field of a /proc/<pid>/cgroup line).
// Returns the innermost container the path names, or nullopt for host
// processes, pod-level or QoS-level cgroups, paths under a private cgroup
// namespace ("/", or any ".." segment: relative to a root we cannot see), and
// CRI-O's conmon monitor (crio-conmon-<ID>): conmon is runtime plumbing like
// containerd-shim, not the workload, so it is reported as a host process.
[[nodiscard]] std::optional<ContainerRef> parse_container_path(std::string_view cgroup_path);

// Picks the line to trust from a whole /proc/<pid>/cgroup: on v1 the `memory`
// controller line first (hybrid hosts' 0:: line may point elsewhere), then the
// v2 `0::` line, then any other line that parses.
[[nodiscard]] std::optional<ContainerRef> container_from_cgroups(
    const std::vector<proc::CgroupLine>& lines);

}  // namespace gpureap::container
