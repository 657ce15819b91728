// The runc runtime: a real OCI container from Debian's runc. The bundle lives
// where containerd keeps a k8s.io task's bundle, and its spec carries the CRI
// annotations, so `gpureap trace --host-root <node root>` names the pod from it
// exactly as on a containerd node. The rootfs is empty but for the host paths
// the lab needs, bind-mounted at the same place (read-only, except the ones
// marked writable), /usr and /etc read-only, and merged-/usr symlinks.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "lab/runtime.hpp"
#include "sys/host_root.hpp"
#include "sys/parse_number.hpp"
#include "sys/pidfd.hpp"

namespace gpureap::lab {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr auto kRuncTimeout = std::chrono::seconds(60);

// containerd's default capabilities for a container (what a pod gets without
// a securityContext): no CAP_SYS_PTRACE, so root in the pod cannot read the
// descriptors of another user's processes, as on a real node.
json default_capabilities() {
  return {"CAP_CHOWN",   "CAP_DAC_OVERRIDE", "CAP_FSETID",           "CAP_FOWNER",
          "CAP_MKNOD",   "CAP_NET_RAW",      "CAP_SETGID",           "CAP_SETUID",
          "CAP_SETFCAP", "CAP_SETPCAP",      "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT",
          "CAP_KILL",    "CAP_AUDIT_WRITE"};
}

class RuncContainer final : public Container {
 public:
  RuncContainer(std::string runc, std::string state_root, std::string id, PodCgroup cgroup,
                Spawned init, std::vector<std::string> env)
      : runc_(std::move(runc)),
        state_root_(std::move(state_root)),
        id_(std::move(id)),
        cgroup_(std::move(cgroup)),
        init_(std::move(init)),
        env_(std::move(env)) {}

  ~RuncContainer() override {
    if (init_.running()) init_.kill_and_reap();
    remove();
  }

  [[nodiscard]] pid_t init_pid() const override { return init_.pid(); }
  [[nodiscard]] int init_pidfd() const override { return init_.pidfd(); }
  [[nodiscard]] const PodCgroup& cgroup() const override { return cgroup_; }

  // `runc exec --detach`: without it runc copies the process's output through
  // pipes of its own and waits until every holder of them is gone, which a
  // worker the command started never is. Detached, the process has our
  // descriptors, and when runc exits it is re-parented to us (a subreaper): the
  // returned handle waits for the command itself.
  sys::Result<Spawned> exec(const ExecSpec& spec) override {
    const std::string pid_file =
        state_root_ + "/" + id_ + "-exec-" + std::to_string(++execs_) + ".pid";
    std::vector<std::string> argv = {runc_,        "--root", state_root_, "exec", "--detach",
                                     "--pid-file", pid_file, "--cwd",     "/"};
    if (spec.uid != 0) {
      argv.push_back("--user");
      argv.push_back(std::to_string(spec.uid) + ":" + std::to_string(spec.uid));
    }
    for (const auto& e : spec.env) {
      argv.push_back("--env");
      argv.push_back(e);
    }
    argv.push_back(id_);
    argv.insert(argv.end(), spec.argv.begin(), spec.argv.end());
    auto runc = spawn(argv, environment_with({}), spec.stdout_fd, spec.stderr_fd);
    if (!runc) return runc.error();
    const auto rc = runc->wait(kRuncTimeout);
    if (!rc || *rc != 0) {
      return sys::Error{EIO, "runc exec " + spec.argv.front() + " failed (exit " +
                                 (rc ? std::to_string(*rc) : "timeout") + ")"};
    }
    auto text = sys::read_file_at(AT_FDCWD, pid_file.c_str(), pid_file);
    ::unlink(pid_file.c_str());
    if (!text) return text.error();
    std::string digits = *text;
    while (!digits.empty() && (digits.back() == '\n' || digits.back() == ' ')) digits.pop_back();
    const auto pid = sys::parse_number<pid_t>(digits);
    if (!pid || *pid <= 0) return sys::Error{EINVAL, pid_file + ": not a pid: '" + digits + "'"};
    auto fd = sys::pidfd_open(*pid);
    if (!fd) return fd.error();
    return Spawned(*pid, std::move(*fd));
  }

  std::optional<int> reap_init(Clock::duration timeout) override { return init_.wait(timeout); }

  void remove() override {
    if (removed_) return;
    removed_ = true;
    if (auto p = spawn({runc_, "--root", state_root_, "delete", "--force", id_},
                       environment_with({}), -1, -1)) {
      (void)p->wait(kRuncTimeout);
    }
  }

 private:
  std::string runc_;
  std::string state_root_;
  std::string id_;
  PodCgroup cgroup_;
  Spawned init_;
  std::vector<std::string> env_;
  bool removed_ = false;
  unsigned execs_ = 0;  // names each exec's pid file
};

class RuncRuntime final : public Runtime {
 public:
  RuncRuntime(std::string runc, std::string node_root, CgroupHierarchy hierarchy)
      : runc_(std::move(runc)),
        node_root_(std::move(node_root)),
        hierarchy_(std::move(hierarchy)) {}

  [[nodiscard]] std::string_view name() const override { return "runc"; }

  sys::Result<std::unique_ptr<Container>> start(const ContainerSpec& spec) override {
    const std::string bundle = containerd_task_dir(node_root_, spec.container_id);
    const std::string rootfs = bundle + "/rootfs";
    const std::string state_root = node_root_ + "/run/runc";
    std::error_code ec;
    for (const char* d : {"/proc", "/dev", "/tmp", "/usr", "/etc", "/sys"})
      fs::create_directories(rootfs + d, ec);
    for (const char* d : {"bin", "sbin", "lib", "lib64"}) {
      if (fs::is_directory(std::string("/usr/") + d))
        fs::create_directory_symlink(std::string("usr/") + d, rootfs + "/" + d, ec);
    }
    fs::create_directories(state_root, ec);

    json mounts = json::array();
    auto bind = [&](const std::string& path, bool writable) {
      fs::create_directories(rootfs + path, ec);
      mounts.push_back({{"destination", path},
                        {"type", "bind"},
                        {"source", path},
                        {"options", {"rbind", writable ? "rw" : "ro"}}});
    };
    const std::string cgroup_path =
        cgroupfs_container_cgroup(spec.cgroup_parent, spec.pod_uid, spec.container_id);
    json config = {
        {"ociVersion", "1.0.2"},
        {"process",
         {{"terminal", false},
          {"user", {{"uid", 0}, {"gid", 0}}},
          {"args", spec.pid1_argv},
          {"env", spec.env},
          {"cwd", "/"},
          {"capabilities",
           {{"bounding", default_capabilities()},
            {"effective", default_capabilities()},
            {"permitted", default_capabilities()}}},
          {"noNewPrivileges", false}}},
        {"root", {{"path", "rootfs"}, {"readonly", true}}},
        {"hostname", spec.pod},
        {"annotations", cri_annotations(spec)},
        {"linux",
         {{"cgroupsPath", cgroup_path},
          {"namespaces",
           json::array(
               {{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}})},
          {"maskedPaths", json::array()},
          {"readonlyPaths", json::array()}}},
    };
    mounts.push_back({{"destination", "/proc"}, {"type", "proc"}, {"source", "proc"}});
    mounts.push_back({{"destination", "/dev"},
                      {"type", "tmpfs"},
                      {"source", "tmpfs"},
                      {"options", {"nosuid", "strictatime", "mode=755", "size=65536k"}}});
    mounts.push_back({{"destination", "/tmp"},
                      {"type", "tmpfs"},
                      {"source", "tmpfs"},
                      {"options", {"nosuid", "nodev"}}});
    mounts.push_back({{"destination", "/sys"},
                      {"type", "sysfs"},
                      {"source", "sysfs"},
                      {"options", {"nosuid", "noexec", "nodev", "ro"}}});
    bind("/usr", false);
    bind("/etc", false);
    for (const auto& h : spec.host_paths) {
      if (h.path.rfind("/usr/", 0) == 0) continue;  // already there
      bind(h.path, h.writable);
    }
    config["mounts"] = std::move(mounts);
    if (auto st = write_text_file(bundle + "/config.json", config.dump(2)); !st) return st.error();

    auto log = open_log(spec.log_path);
    if (!log) return log.error();
    // runc run --detach: PID 1's stdio are ours (the container log); when runc
    // exits, PID 1 is re-parented to us (a child subreaper) and we reap it.
    auto run = spawn(
        {runc_, "--root", state_root, "run", "--detach", "--bundle", bundle, spec.container_id},
        environment_with({}), log->get(), log->get());
    if (!run) return run.error();
    const auto rc = run->wait(kRuncTimeout);
    if (!rc || *rc != 0) {
      return sys::Error{EIO, "runc run " + spec.container_id + " failed (exit " +
                                 (rc ? std::to_string(*rc) : "timeout") + "): see " +
                                 spec.log_path};
    }
    auto pid = init_pid_of(state_root, spec.container_id, spec.log_path);
    if (!pid) return pid.error();
    auto fd = sys::pidfd_open(*pid);
    if (!fd) return fd.error();
    PodCgroup cgroup(hierarchy_, cgroup_path);
    return std::unique_ptr<Container>(new RuncContainer(runc_, state_root, spec.container_id,
                                                        std::move(cgroup),
                                                        Spawned(*pid, std::move(*fd)), spec.env));
  }

 private:
  sys::Result<pid_t> init_pid_of(const std::string& state_root, const std::string& id,
                                 const std::string& scratch_dir_file) {
    const std::string out = scratch_dir_file + ".state";
    auto rc = run_to_files({runc_, "--root", state_root, "state", id}, environment_with({}), out,
                           "/dev/null", kRuncTimeout);
    if (!rc || *rc != 0) return sys::Error{EIO, "runc state " + id + " failed"};
    auto text = sys::read_file_at(AT_FDCWD, out.c_str(), out);
    ::unlink(out.c_str());
    if (!text) return text.error();
    const json state = json::parse(*text, nullptr, false);
    if (!state.is_object() || !state.contains("pid") || !state["pid"].is_number_integer()) {
      return sys::Error{EINVAL, "runc state " + id + ": no pid in its answer"};
    }
    return state["pid"].get<pid_t>();
  }

  std::string runc_;
  std::string node_root_;
  CgroupHierarchy hierarchy_;
};

}  // namespace

sys::Result<std::unique_ptr<Runtime>> make_runc_runtime(std::string runc_path,
                                                        std::string node_root,
                                                        CgroupHierarchy hierarchy) {
  // runc's PID 1 outlives `runc run --detach`; as a subreaper we adopt and reap it.
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1) != 0)
    return sys::errno_error(errno, "prctl(PR_SET_CHILD_SUBREAPER)");
  return std::unique_ptr<Runtime>(
      new RuncRuntime(std::move(runc_path), std::move(node_root), std::move(hierarchy)));
}

}  // namespace gpureap::lab
