// Which processes `gpureap prestop` may signal: the GPU users of its own
// container, positively identified. A pure function over one NodeSnapshot and
// our own identity, so every rule is testable on a built snapshot.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "node/snapshot.hpp"

namespace gpureap::prestop {

// Who we are, read from /proc/self under the root (see self.hpp).
struct SelfIdentity {
  pid_t pid = 0;                            // our pid in the /proc we read
  std::uint64_t pid_namespace = 0;          // inode of /proc/self/ns/pid
  std::optional<std::string> container_id;  // from our own cgroup; nullopt: not in a container
};

// A process we will signal: a GPU user of our PID namespace and container.
struct Target {
  pid_t pid = 0;
  std::uint64_t start_time = 0;  // identity with pid: checked again right before the signal
  std::string comm;
  unsigned gpu_fds = 0;                    // descriptors on GPU device nodes
  std::vector<std::uint32_t> driver_pids;  // the driver's PIDs matched to it (empty: not listed)
  std::vector<unsigned> devices;           // device indexes of those listings
  std::optional<std::uint64_t> gpu_memory;  // bytes the driver attributes to it
};

enum class SkipReason {
  self,                      // this very process (NVML opens the device nodes)
  pid1,                      // local PID 1: the runtime's SIGTERM is its own (--include-pid1)
  zombie,                    // exited, unreaped: holds nothing, nothing to signal
  other_pid_namespace,       // not in our PID namespace (a nested one)
  pid_namespace_unreadable,  // /proc/<pid>/ns/pid could not be read: not identified
  other_container,           // another container's process (shared PID namespace)
  not_a_process_here,        // a driver PID that names no process in our /proc (host PID?)
  no_gpu_descriptor,         // a driver PID that names a process here holding no GPU descriptor
};
std::string_view to_string(SkipReason r);

struct Skipped {
  std::optional<pid_t> pid;                 // the process, when there is one
  std::optional<std::uint32_t> driver_pid;  // the driver's PID, when the skip is about a listing
  std::string comm;
  SkipReason reason = SkipReason::self;
};
// One log line (without the "gpureap prestop: " prefix).
std::string describe(const Skipped& s);

struct Selection {
  std::vector<Target> targets;  // sorted by pid
  std::vector<Skipped> skipped;
};

struct SelectOptions {
  bool include_pid1 = false;
};

// The pid-namespace inode of a process in the snapshot's /proc; nullopt when unreadable.
using PidNamespaceOf = std::function<std::optional<std::uint64_t>(pid_t)>;

// A GPU user is a process holding a descriptor on a GPU device node, or one the
// driver lists (through the snapshot's matching: host, thread, namespace). It
// is a target when it is alive (not a zombie), not us, in our PID namespace, in
// our container (when we are in one), not PID 1 (unless asked), and — when the
// driver lists it — it also holds a GPU descriptor: a driver PID that names a
// process without one is taken for a host PID that happens to collide.
Selection select_targets(const node::NodeSnapshot& snap, const SelfIdentity& self,
                         const PidNamespaceOf& pid_namespace_of, const SelectOptions& options);

}  // namespace gpureap::prestop
