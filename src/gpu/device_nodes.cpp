#include "gpu/device_nodes.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <algorithm>
#include <charconv>

#include "sys/dir.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::gpu {

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

void add_node(const sys::HostRoot& root, const std::string& name, std::vector<proc::DeviceNode>& out) {
  proc::DeviceNode node{name, "/dev/" + name, std::nullopt, std::nullopt};
  struct stat st {};
  // Follows symlinks: some hosts link /dev/nvidia* into /dev/char or a container runtime's dir.
  if (::fstatat(root.dir_fd(), ("dev/" + name).c_str(), &st, 0) == 0) {
    if (S_ISCHR(st.st_mode)) node.rdev = st.st_rdev;
    if (S_ISREG(st.st_mode)) node.file = proc::FileId{st.st_dev, st.st_ino};
  }
  out.push_back(std::move(node));
}

}  // namespace

std::vector<CharDevice> parse_proc_devices(std::string_view text) {
  std::vector<CharDevice> out;
  bool in_char = false;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = trim(text.substr(0, nl));
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    if (line == "Character devices:") {
      in_char = true;
      continue;
    }
    if (line == "Block devices:") {
      in_char = false;
      continue;
    }
    if (!in_char || line.empty()) continue;
    unsigned major = 0;
    auto [end, ec] = std::from_chars(line.data(), line.data() + line.size(), major);
    if (ec != std::errc{} || end == line.data() + line.size() || (*end != ' ' && *end != '\t')) continue;
    std::string_view name = trim(line.substr(static_cast<std::size_t>(end - line.data())));
    if (name.empty() || major > 4095) continue;  // majors are 12 bits
    out.push_back(CharDevice{major, std::string(name)});
  }
  return out;
}

std::vector<unsigned> nvidia_majors(const std::vector<CharDevice>& devices) {
  std::vector<unsigned> majors;
  for (const auto& d : devices) {
    if (d.name.rfind("nvidia", 0) == 0) majors.push_back(d.major);
  }
  std::sort(majors.begin(), majors.end());
  majors.erase(std::unique(majors.begin(), majors.end()), majors.end());
  return majors;
}

proc::DeviceMatcher real_device_matcher(const sys::HostRoot& root) {
  proc::DeviceMatcher m;
  for (const auto& name : sys::entry_names(root.dir_fd(), "dev")) {
    if (name.rfind("nvidia", 0) != 0) continue;
    // nvidia-caps/ and nvidia-caps-imex-channels/ are directories of nodes.
    struct stat st {};
    const std::string rel = "dev/" + name;
    if (::fstatat(root.dir_fd(), rel.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode)) {
      for (const auto& cap : sys::entry_names(root.dir_fd(), rel.c_str()))
        add_node(root, std::string(name).append("/").append(cap), m.nodes);
      continue;
    }
    add_node(root, name, m.nodes);
  }
  if (auto text = root.read_file("proc/devices")) m.majors = nvidia_majors(parse_proc_devices(*text));
  return m;
}

}  // namespace gpureap::gpu
