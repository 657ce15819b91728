#include "lab/node.hpp"

#include <limits.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>

#include "gpu/sim_client.hpp"
#include "lab/ids.hpp"

namespace gpureap::lab {

namespace fs = std::filesystem;

namespace {

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  if (n <= 0) return {};
  return std::string(buf, static_cast<std::size_t>(n));
}

}  // namespace

sys::Result<Toolbox> Toolbox::find(Needs needs) {
  Toolbox t;
  t.gpureap = self_exe();
  if (t.gpureap.empty()) return sys::Error{ENOENT, "cannot read /proc/self/exe"};
  const fs::path here = fs::path(t.gpureap).parent_path();
  // Installed or staged side by side; or the build tree (build/<preset>/src/cli/gpureap).
  const std::vector<std::string> dirs = {here.string(), (here.parent_path() / "workers").string(),
                                         (here.parent_path() / "init").string()};
  std::vector<std::string> missing;
  auto need = [&](std::string& slot, std::initializer_list<const char*> names, bool required) {
    for (const char* n : names) {
      if (auto p = find_program(n, dirs)) {
        slot = *p;
        return;
      }
    }
    if (required) missing.emplace_back(*names.begin());
  };
  need(t.worker, {"gpureap-worker"}, true);
  need(t.worker_dynamic, {"gpureap-worker-dynamic"}, needs.dynamic_worker);
  need(t.init, {"gpureap-init"}, true);
  need(t.tini, {"tini", "tini-static"}, true);
  need(t.bash, {"bash"}, true);
  need(t.sleep, {"sleep"}, true);
  need(t.python3, {"python3"}, needs.python);
  need(t.runc, {"runc"}, needs.runc);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return sys::Error{ENOENT,
                      "gpureap lab needs " + list + " (looked next to " + t.gpureap +
                          ", in the build tree and in $PATH; `make lab` builds and installs them)"};
  }
  return t;
}

std::string Toolbox::resolve(const std::string& name) const {
  if (name == "bash") return bash;
  if (name == "tini") return tini;
  if (name == "gpureap-init") return init;
  if (name == "sleep") return sleep;
  return name;
}

std::vector<HostPath> Toolbox::host_paths() const {
  std::vector<HostPath> out;
  for (const std::string* p : {&gpureap, &worker, &worker_dynamic, &init, &tini}) {
    if (p->empty()) continue;
    const std::string dir = fs::path(*p).parent_path().string();
    bool seen = false;
    for (const auto& h : out) seen = seen || h.path == dir;
    if (!seen) out.push_back(HostPath{dir, false});
  }
  return out;
}

sys::Result<std::unique_ptr<LabNode>> LabNode::create() {
  const char* tmp = std::getenv("TMPDIR");
  std::string tmpl =
      std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/gpureap-lab-XXXXXX";
  if (::mkdtemp(tmpl.data()) == nullptr) return sys::errno_error(errno, "mkdtemp " + tmpl);
  // Every user may enter it: the non-root variant's workers open the sim device here.
  if (::chmod(tmpl.c_str(), 0755) != 0) return sys::errno_error(errno, "chmod " + tmpl);
  std::unique_ptr<LabNode> node(new LabNode(tmpl, "/gpureap-lab-" + random_hex(12)));
  std::error_code ec;
  for (const char* link : {"proc", "sys", "dev"}) {
    fs::create_directory_symlink(std::string("/") + link, tmpl + "/" + link, ec);
    if (ec) return sys::Error{ec.value(), "symlink " + tmpl + "/" + link + ": " + ec.message()};
  }
  for (const char* d :
       {"run/containerd", "var/log/pods", "var/log/containers", "opt/gpureap-lab"}) {
    fs::create_directories(tmpl + "/" + d, ec);
    if (ec) return sys::Error{ec.value(), "mkdir " + tmpl + "/" + d + ": " + ec.message()};
  }
  return node;
}

LabNode::~LabNode() {
  (void)cleanup();
}

std::vector<std::string> LabNode::cleanup() {
  if (cleaned_) return {};
  cleaned_ = true;
  auto failed = remove_cgroup_tree(cgroup_parent_);
  std::error_code ec;
  // The symlinks to /proc, /sys and /dev are removed as links, never followed.
  fs::remove_all(root_, ec);
  if (ec) failed.push_back(root_ + ": " + ec.message());
  return failed;
}

sys::Status LabNode::init_sim(unsigned devices) const {
  if (auto st = gpu::sim::init_sim_dir(sim_dir(), gpu::sim::default_config(devices)); !st)
    return st;
  // Contexts are created by every worker, the non-root variant's too.
  const std::string ctx = sim_dir() + "/ctx";
  if (::chmod(ctx.c_str(), 01777) != 0) return sys::errno_error(errno, "chmod " + ctx);
  return sys::Ok{};
}

sys::Status LabNode::write_python() const {
  for (const auto& src : python_sources()) {
    if (auto st = write_text_file(python_dir() + "/" + src.name, src.text); !st) return st;
  }
  return sys::Ok{};
}

sys::Result<std::string> LabNode::pod_log(const ContainerSpec& spec) const {
  const std::string pod_dir = spec.pod_namespace + "_" + spec.pod + "_" + spec.pod_uid;
  const std::string dir = root_ + "/var/log/pods/" + pod_dir + "/" + spec.container_name;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return sys::Error{ec.value(), "mkdir " + dir + ": " + ec.message()};
  const std::string log = dir + "/0.log";
  if (auto fd = open_log(log); !fd) return fd.error();
  const std::string link = root_ + "/var/log/containers/" + spec.pod + "_" + spec.pod_namespace +
                           "_" + spec.container_name + "-" + spec.container_id + ".log";
  // The kubelet's link names the host's path (read as text, never followed).
  fs::create_symlink("/var/log/pods/" + pod_dir + "/" + spec.container_name + "/0.log", link, ec);
  if (ec) return sys::Error{ec.value(), "symlink " + link + ": " + ec.message()};
  return log;
}

}  // namespace gpureap::lab
