#include "lab/cgroup.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <mntent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <sstream>

#include "proc/parse.hpp"
#include "sys/host_root.hpp"
#include "sys/parse_number.hpp"
#include "sys/pidfd.hpp"

namespace gpureap::lab {

namespace {

struct Mount {
  std::string dir;
  std::string type;
  bool memory = false;
};

std::vector<Mount> cgroup_mounts() {
  std::vector<Mount> out;
  FILE* f = ::setmntent("/proc/self/mounts", "r");
  if (f == nullptr) return out;
  while (mntent* m = ::getmntent(f)) {
    const bool v1 = std::strcmp(m->mnt_type, "cgroup") == 0;
    const bool v2 = std::strcmp(m->mnt_type, "cgroup2") == 0;
    if (!v1 && !v2) continue;
    out.push_back(Mount{m->mnt_dir, m->mnt_type, v1 && ::hasmntopt(m, "memory") != nullptr});
  }
  ::endmntent(f);
  return out;
}

// "cpu,cpuacct" has "cpu"; "name=memory" has no "memory".
bool has_controller(std::string_view list, std::string_view name) {
  while (!list.empty()) {
    const auto comma = list.find(',');
    if (list.substr(0, comma) == name) return true;
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
  }
  return false;
}

std::string underscored(std::string uid) {
  std::replace(uid.begin(), uid.end(), '-', '_');
  return uid;
}

// Depth-first rmdir of a cgroup directory tree.
void rmdir_tree(const std::string& dir, std::vector<std::string>& failed) {
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<std::string> subdirs;
    while (dirent* e = ::readdir(d)) {
      if (e->d_type != DT_DIR || std::strcmp(e->d_name, ".") == 0 ||
          std::strcmp(e->d_name, "..") == 0)
        continue;
      subdirs.emplace_back(dir + "/" + e->d_name);
    }
    ::closedir(d);
    for (const auto& s : subdirs) rmdir_tree(s, failed);
  }
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT)
    failed.push_back(dir + ": " + std::strerror(errno));
}

}  // namespace

sys::Result<CgroupHierarchy> pods_hierarchy() {
  const auto mounts = cgroup_mounts();
  for (const auto& m : mounts) {
    if (m.memory) return CgroupHierarchy{m.dir, false};
  }
  for (const auto& m : mounts) {
    if (m.type == "cgroup2") return CgroupHierarchy{m.dir, true};
  }
  return sys::Error{
      ENOENT,
      "no cgroup hierarchy mounted (no v1 memory controller, no cgroup2) in /proc/self/mounts"};
}

std::vector<std::string> all_hierarchy_mounts() {
  std::vector<std::string> out;
  for (const auto& m : cgroup_mounts()) out.push_back(m.dir);
  return out;
}

std::string systemd_container_cgroup(const std::string& parent, const std::string& pod_uid,
                                     const std::string& id) {
  return parent + "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" +
         underscored(pod_uid) + ".slice/cri-containerd-" + id + ".scope";
}

std::string cgroupfs_container_cgroup(const std::string& parent, const std::string& pod_uid,
                                      const std::string& id) {
  return parent + "/kubepods/besteffort/pod" + pod_uid + "/" + id;
}

sys::Status PodCgroup::create() const {
  std::string partial = hierarchy_.mount;
  std::string_view rest(path_);
  while (!rest.empty()) {
    while (!rest.empty() && rest.front() == '/') rest.remove_prefix(1);
    const auto slash = rest.find('/');
    const std::string_view part = rest.substr(0, slash);
    rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash);
    if (part.empty()) continue;
    partial += "/" + std::string(part);
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST)
      return sys::errno_error(errno, "mkdir " + partial);
  }
  return sys::Ok{};
}

sys::Result<std::vector<pid_t>> PodCgroup::procs() const {
  const std::string file = dir() + "/cgroup.procs";
  auto text = sys::read_file_at(AT_FDCWD, file.c_str(), file);
  if (!text) return text.error();
  std::vector<pid_t> out;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (auto pid = sys::parse_number<pid_t>(line)) out.push_back(*pid);
  }
  return out;
}

sys::Result<sys::UniqueFd> PodCgroup::open_procs_for_join() const {
  const std::string file = dir() + "/cgroup.procs";
  int fd = ::open(file.c_str(), O_WRONLY | O_CLOEXEC);
  if (fd < 0) return sys::errno_error(errno, "open " + file);
  return sys::UniqueFd(fd);
}

sys::Status PodCgroup::add(pid_t pid) const {
  auto fd = open_procs_for_join();
  if (!fd) return fd.error();
  const std::string text = std::to_string(pid);
  if (::write(fd->get(), text.data(), text.size()) != static_cast<ssize_t>(text.size())) {
    return sys::errno_error(errno, "move pid " + text + " into " + dir());
  }
  return sys::Ok{};
}

bool PodCgroup::contains(pid_t pid) const {
  const std::string file = "/proc/" + std::to_string(pid) + "/cgroup";
  auto text = sys::read_file_at(AT_FDCWD, file.c_str(), file);
  if (!text) return false;
  for (const auto& line : proc::parse_cgroup(*text)) {
    const bool right_hierarchy = hierarchy_.v2 ? line.hierarchy_id == 0 && line.controllers.empty()
                                               : has_controller(line.controllers, "memory");
    if (right_hierarchy && line.path == path_) return true;
  }
  return false;
}

std::vector<std::string> remove_cgroup_tree(const std::string& parent) {
  std::vector<std::string> failed;
  if (parent.empty() || parent == "/") return failed;
  for (const auto& mount : all_hierarchy_mounts()) {
    struct stat st {};
    const std::string dir = mount + parent;
    if (::stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) rmdir_tree(dir, failed);
  }
  return failed;
}

std::vector<sys::UniqueFd> kill_cgroup(const PodCgroup& cgroup, int signo) {
  std::vector<sys::UniqueFd> out;
  auto pids = cgroup.procs();
  if (!pids) return out;
  for (pid_t pid : *pids) {
    auto fd = sys::pidfd_open(pid);
    if (!fd) continue;  // exited meanwhile
    // Listed, then opened, then still a member: the pidfd names the member.
    if (!cgroup.contains(pid)) continue;
    if (sys::pidfd_send_signal(fd->get(), signo)) out.push_back(std::move(*fd));
  }
  return out;
}

}  // namespace gpureap::lab
