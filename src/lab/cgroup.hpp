// The pods' cgroups, named as the kubelet names them, under one parent of the
// lab's own ("/gpureap-lab-<hex>") so that a lab never writes into a real
// kubelet's tree and two labs never share a directory. trace reads the
// innermost kubelet-shaped segments, so the parent prefix changes nothing for it.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "sys/error.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::lab {

// Where pods go: the v1 memory hierarchy where the host has one (the plan's
// node was cgroup v1), else the v2 hierarchy.
struct CgroupHierarchy {
  std::string mount;  // "/sys/fs/cgroup/memory" or "/sys/fs/cgroup"
  bool v2 = false;
};
sys::Result<CgroupHierarchy> pods_hierarchy();

// Every cgroup hierarchy mounted here (each v1 controller mount and the v2 one).
std::vector<std::string> all_hierarchy_mounts();

// The kubelet's names (FACTS.md): systemd driver
//   <parent>/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod<U_>.slice/cri-containerd-<ID>.scope
// and cgroupfs driver
//   <parent>/kubepods/besteffort/pod<uid>/<ID>
std::string systemd_container_cgroup(const std::string& parent, const std::string& pod_uid,
                                     const std::string& id);
std::string cgroupfs_container_cgroup(const std::string& parent, const std::string& pod_uid,
                                      const std::string& id);

// One container's cgroup in one hierarchy.
class PodCgroup {
 public:
  PodCgroup(CgroupHierarchy hierarchy, std::string path)
      : hierarchy_(std::move(hierarchy)), path_(std::move(path)) {}
  // mkdir -p of the path.
  [[nodiscard]] sys::Status create() const;
  [[nodiscard]] const std::string& path() const { return path_; }  // as /proc/PID/cgroup shows it
  [[nodiscard]] std::string dir() const { return hierarchy_.mount + path_; }
  [[nodiscard]] const CgroupHierarchy& hierarchy() const { return hierarchy_; }
  // The host PIDs in it now; an error when it cannot be read (gone).
  [[nodiscard]] sys::Result<std::vector<pid_t>> procs() const;
  // An open O_WRONLY cgroup.procs: writing "0" moves the writer in.
  [[nodiscard]] sys::Result<sys::UniqueFd> open_procs_for_join() const;
  [[nodiscard]] sys::Status add(pid_t pid) const;
  // Whether `pid`'s /proc/PID/cgroup line for this hierarchy names this cgroup.
  [[nodiscard]] bool contains(pid_t pid) const;

 private:
  CgroupHierarchy hierarchy_;
  std::string path_;
};

// Removes `parent` and everything below it in every hierarchy, deepest first
// (a cgroup directory can go only when it holds no process). Returns the
// directories that could not be removed.
std::vector<std::string> remove_cgroup_tree(const std::string& parent);

// SIGKILLs every process in the cgroup, each by a pidfd opened after it was
// listed and checked to be still in the cgroup (positive identification), and
// returns the pidfds so the caller can wait for the exits.
std::vector<sys::UniqueFd> kill_cgroup(const PodCgroup& cgroup, int signo);

}  // namespace gpureap::lab
