// The process model every other layer reads: one entry per thread-group leader,
// filled by the scan from /proc/<pid>/{status,stat,cmdline,cgroup,fd,environ}.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace gpureap::proc {

// One line of /proc/<pid>/cgroup: "hierarchy-ID:controller-list:cgroup-path".
struct CgroupLine {
  unsigned hierarchy_id = 0;
  std::string controllers;  // "memory", "cpu,cpuacct", "name=systemd", "" for the v2 line
  std::string path;         // may itself contain ':' (misconfigured containerd form)
  bool operator==(const CgroupLine&) const = default;
};

// How many descriptors a process has open on one NVIDIA (or simulated) device node.
struct DeviceUse {
  std::string device;  // node name: "nvidia0", "nvidiactl", "nvidia-uvm", ...
  unsigned count = 0;
  bool operator==(const DeviceUse&) const = default;
};

struct Process {
  pid_t pid = 0;                 // in the host root's PID namespace (the /proc we read)
  pid_t tgid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  uid_t uid = 0;                 // real uid
  char state = '?';              // R S D Z T t X I
  std::vector<pid_t> nspid;      // NSpid: outermost first, innermost (container-local) last
  std::uint64_t start_time = 0;  // clock ticks since boot (stat field 22): identity with pid
  std::string comm;
  std::vector<std::string> cmdline;
  std::vector<CgroupLine> cgroups;
  std::vector<DeviceUse> gpu_fds;  // only devices the scan was asked to match
  // Which open file descriptions those GPU descriptors refer to, sorted, no
  // repeats: a value two processes both hold is one description they share
  // (inherited over fork, or passed over a socket). Opaque and never printed:
  // the kernel iterator gives its file objects' addresses; for the /proc walk
  // proc/file_identity numbers them with kcmp(KCMP_FILE). Empty when unknown.
  std::vector<std::uint64_t> gpu_files;
  // The GPU descriptors' numbers (in the leader's table), for kcmp.
  std::vector<int> gpu_fd_numbers;
  unsigned fd_count = 0;           // all descriptors seen
  bool fds_readable = false;       // false: /proc/<pid>/fd could not be listed (permission, race)
  std::vector<std::pair<std::string, std::string>> env;  // only keys asked for

  [[nodiscard]] pid_t local_pid() const { return nspid.empty() ? pid : nspid.back(); }
  [[nodiscard]] bool zombie() const { return state == 'Z'; }
  [[nodiscard]] unsigned gpu_fd_total() const {
    unsigned n = 0;
    for (const auto& d : gpu_fds) n += d.count;
    return n;
  }
};

}  // namespace gpureap::proc
