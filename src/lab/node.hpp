// The lab's node: a directory that `gpureap trace --host-root` reads as a
// Kubernetes node (proc, sys and dev are the real ones; run/ and var/log/ hold
// what containerd and the kubelet would write there), the simulated GPU's
// directory, the programs the scenarios run, and the cgroup parent of the
// pods. Everything the lab makes on the machine is made here and removed by
// the destructor.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "lab/runtime.hpp"
#include "sys/error.hpp"

namespace gpureap::lab {

// The programs a run needs, as absolute paths.
struct Toolbox {
  std::string gpureap;         // this binary
  std::string worker;          // gpureap-worker (static; the simulated GPU, and runc's bare rootfs)
  std::string worker_dynamic;  // gpureap-worker-dynamic (CUDA's driver API needs a dynamic binary);
                               // may be empty
  std::string init;            // gpureap-init
  std::string tini;            // tini, else tini-static
  std::string bash;
  std::string sleep;
  std::string python3;  // only for --workload torch
  std::string runc;     // only for --runtime runc

  struct Needs {
    bool runc = false;
    bool python = false;
    bool dynamic_worker = false;
  };
  // Looks next to this binary, in the build tree's layout (src/cli, src/workers,
  // src/init), then in $PATH. The error names every program it could not find.
  static sys::Result<Toolbox> find(Needs needs);

  // Where a program named in a scenario's PID 1 command ("bash", "tini", "gpureap-init") is.
  [[nodiscard]] std::string resolve(const std::string& name) const;
  // The directories of the lab's own programs (runc binds them at the same path).
  [[nodiscard]] std::vector<HostPath> host_paths() const;
};

class LabNode {
 public:
  // A fresh node directory under $TMPDIR (else /tmp), readable by every user
  // (the non-root variant's workers open the simulated device there), and a
  // fresh cgroup parent.
  static sys::Result<std::unique_ptr<LabNode>> create();
  LabNode(const LabNode&) = delete;
  LabNode& operator=(const LabNode&) = delete;
  LabNode(LabNode&&) = delete;
  LabNode& operator=(LabNode&&) = delete;
  ~LabNode();

  [[nodiscard]] const std::string& root() const { return root_; }
  [[nodiscard]] std::string sim_dir() const { return root_ + "/run/gpureap/sim"; }
  [[nodiscard]] std::string python_dir() const { return root_ + "/opt/gpureap-lab"; }
  [[nodiscard]] const std::string& cgroup_parent() const { return cgroup_parent_; }

  // Creates the simulated GPU with `devices` devices (one per scenario: each
  // pod gets its own GPU, as `nvidia.com/gpu: 1` gives it).
  [[nodiscard]] sys::Status init_sim(unsigned devices) const;
  // Writes the torch workload's Python programs into python_dir().
  [[nodiscard]] sys::Status write_python() const;

  // The kubelet's log files of a container: var/log/pods/<ns>_<pod>_<uid>/<container>/0.log,
  // and var/log/containers/<pod>_<ns>_<container>-<id>.log linking to it.
  // Returns the log's path.
  [[nodiscard]] sys::Result<std::string> pod_log(const ContainerSpec& spec) const;

  // Directories that could not be removed at the end (a process survived).
  [[nodiscard]] std::vector<std::string> cleanup();

 private:
  LabNode(std::string root, std::string cgroup_parent)
      : root_(std::move(root)), cgroup_parent_(std::move(cgroup_parent)) {}
  std::string root_;
  std::string cgroup_parent_;
  bool cleaned_ = false;
};

// The Python programs of --workload torch, embedded at build time: name → text.
struct PythonSource {
  const char* name;
  const char* text;
};
const std::vector<PythonSource>& python_sources();

}  // namespace gpureap::lab
