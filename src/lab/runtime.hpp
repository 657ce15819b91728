// Container runtimes of the lab, one per file behind this interface: the
// built-in one (namespaces and a kubelet-named cgroup, made here) and Debian's
// runc (a real OCI container). The lab plays the kubelet; a runtime only
// starts containers, execs into them and cleans up after them.
#pragma once

#include <sys/types.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "lab/cgroup.hpp"
#include "lab/process.hpp"
#include "sys/error.hpp"

namespace gpureap::lab {

struct HostPath {
  std::string path;
  bool writable = false;
};

struct ContainerSpec {
  std::string pod;
  std::string pod_namespace;
  std::string pod_uid;  // a UUID
  std::string container_name;
  std::string container_id;            // 64 hex
  std::vector<std::string> pid1_argv;  // absolute program path first
  std::vector<std::string> env;        // KEY=VALUE, for PID 1 and every exec
  std::vector<HostPath> host_paths;    // must be visible in the container at the same path
  std::string cgroup_parent;           // "/gpureap-lab-<hex>"
  std::string log_path;                // PID 1's stdout and stderr
};

struct ExecSpec {
  std::vector<std::string> argv;  // absolute program path first
  std::vector<std::string> env;   // added to the container's
  unsigned uid = 0;               // the user (and group) it runs as
  int stdout_fd = -1;             // -1: /dev/null
  int stderr_fd = -1;
};

class Container {
 public:
  Container() = default;
  Container(const Container&) = delete;
  Container& operator=(const Container&) = delete;
  Container(Container&&) = delete;
  Container& operator=(Container&&) = delete;
  virtual ~Container() = default;

  [[nodiscard]] virtual pid_t init_pid() const = 0;  // PID 1, as a host PID
  [[nodiscard]] virtual int init_pidfd() const = 0;  // valid until reap_init()
  [[nodiscard]] virtual const PodCgroup& cgroup() const = 0;
  // Like `kubectl exec`: the command runs in the container's namespaces and
  // cgroup; the returned process is its helper on the node, which ends with
  // the command's status.
  virtual sys::Result<Spawned> exec(const ExecSpec& spec) = 0;
  // Waits for PID 1 to exit and reaps it: its status as a shell gives it;
  // nullopt when `timeout` passed first.
  virtual std::optional<int> reap_init(Clock::duration timeout) = 0;
  // After PID 1 is reaped and the cgroup is empty: the runtime's clean-up.
  virtual void remove() = 0;
};

class Runtime {
 public:
  Runtime() = default;
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;
  Runtime(Runtime&&) = delete;
  Runtime& operator=(Runtime&&) = delete;
  virtual ~Runtime() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;
  virtual sys::Result<std::unique_ptr<Container>> start(const ContainerSpec& spec) = 0;
};

// Where containerd keeps a k8s.io task's bundle under a node root (FACTS.md):
// trace reads the CRI annotations of its config.json to name the pod.
std::string containerd_task_dir(const std::string& node_root, const std::string& container_id);
// The CRI annotations containerd writes into a container's spec.
nlohmann::json cri_annotations(const ContainerSpec& spec);

// New PID, mount, UTS and IPC namespaces with the container's own /proc, the
// host's filesystem otherwise, in a systemd-driver kubelet cgroup; the task's
// state (its spec with the CRI annotations) where containerd keeps it under
// `node_root`.
std::unique_ptr<Runtime> make_builtin_runtime(CgroupHierarchy hierarchy, std::string node_root);

// Debian's runc: bundles under <node root>/run/containerd/io.containerd.runtime.v2.task/k8s.io/<ID>
// (where containerd keeps them, so trace reads the CRI annotations), state
// under <node root>/run/runc, a cgroupfs-driver kubelet cgroup.
sys::Result<std::unique_ptr<Runtime>> make_runc_runtime(std::string runc_path,
                                                        std::string node_root,
                                                        CgroupHierarchy hierarchy);

}  // namespace gpureap::lab
