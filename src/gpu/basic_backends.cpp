#include "gpu/basic_backends.hpp"

#include <fcntl.h>
#include <sys/sysmacros.h>

#include <algorithm>

#include "gpu/device_nodes.hpp"
#include "gpu/snapshot_json.hpp"

namespace gpureap::gpu {

namespace {

constexpr unsigned kNvidiaMajor = 195;  // nvidiaN, nvidiactl (255), nvidia-modeset (254)
constexpr unsigned kCtlMinor = 255;

sys::Result<GpuSnapshot> load(const std::string& path) {
  auto text = sys::read_file_at(AT_FDCWD, path.c_str(), path);
  if (!text) return text.error();
  return snapshot_from_json_text(*text, path);
}

class JsonBackend final : public GpuBackend {
 public:
  JsonBackend(std::string path, sys::HostRoot root, GpuSnapshot first)
      : path_(std::move(path)), root_(std::move(root)), first_(std::move(first)) {}

  [[nodiscard]] std::string_view name() const override { return "json"; }
  sys::Result<GpuSnapshot> snapshot() override { return load(path_); }

  [[nodiscard]] proc::DeviceMatcher device_matcher() const override {
    proc::DeviceMatcher m = real_device_matcher(root_);
    // Nodes the host root lacks are added with the driver's fixed numbers
    // (FACTS.md); nvidia-uvm's major is dynamic, so it is matched by path only.
    auto add = [&m](const std::string& n, std::optional<dev_t> rdev) {
      bool known = std::any_of(m.nodes.begin(), m.nodes.end(), [&](const auto& node) { return node.name == n; });
      if (!known) m.nodes.push_back(proc::DeviceNode{n, "/dev/" + n, rdev, std::nullopt});
    };
    for (const auto& d : first_.devices) {
      if (d.minor) add("nvidia" + std::to_string(*d.minor), makedev(kNvidiaMajor, *d.minor));
    }
    add("nvidiactl", makedev(kNvidiaMajor, kCtlMinor));
    add("nvidia-uvm", std::nullopt);
    if (std::find(m.majors.begin(), m.majors.end(), kNvidiaMajor) == m.majors.end()) {
      m.majors.insert(m.majors.begin(), kNvidiaMajor);
    }
    return m;
  }

  [[nodiscard]] std::string unavailable_reason() const override {
    return first_.devices.empty() ? "replayed snapshot " + path_ + " has no devices" : std::string();
  }

  // Only where this node has NVIDIA device nodes: without them the replay is of
  // another machine (or a test's fiction) and its PIDs' descriptors prove nothing.
  [[nodiscard]] bool listed_processes_hold_descriptors() const override {
    return !real_device_matcher(root_).nodes.empty();
  }

 private:
  std::string path_;
  sys::HostRoot root_;
  GpuSnapshot first_;  // as parsed at creation: what the matcher is built from
};

class NoneBackend final : public GpuBackend {
 public:
  explicit NoneBackend(std::string reason) : reason_(std::move(reason)) {}
  [[nodiscard]] std::string_view name() const override { return "none"; }
  sys::Result<GpuSnapshot> snapshot() override { return GpuSnapshot{}; }
  [[nodiscard]] proc::DeviceMatcher device_matcher() const override { return {}; }
  [[nodiscard]] std::string unavailable_reason() const override { return reason_; }

 private:
  std::string reason_;
};

}  // namespace

sys::Result<std::unique_ptr<GpuBackend>> make_json_backend(std::string path, const sys::HostRoot& root) {
  if (path.empty()) return sys::Error{EINVAL, "--gpu json:FILE: empty file name"};
  auto first = load(path);
  if (!first) return first.error();
  return std::unique_ptr<GpuBackend>(std::make_unique<JsonBackend>(std::move(path), root, std::move(*first)));
}

std::unique_ptr<GpuBackend> make_none_backend(std::string reason) {
  return std::make_unique<NoneBackend>(std::move(reason));
}

}  // namespace gpureap::gpu
