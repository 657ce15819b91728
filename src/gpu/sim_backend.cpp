#include "gpu/sim_backend.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <climits>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "sys/dir.hpp"
#include "sys/parse_number.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::gpu {

namespace {

using nlohmann::json;

using sys::parse_number;

// Iterates a directory opened relative to `dir_fd`; the callback gets the
// directory's fd and each name.
template <class F>
bool for_each_entry(int dir_fd, const char* rel, F&& fn) {
  const auto listing = sys::list_dir(dir_fd, rel);
  if (!listing) return false;
  for (const auto& name : listing->names) fn(listing->dir.get(), std::string_view(name));
  return true;
}

struct CtxFile {
  sim::ContextName name;
  std::uint64_t bytes = 0;
  unsigned sm_percent = 0;
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<pid_t> holders;  // pids in the host root's /proc
};

// Innermost NSpid of a process (its pid in its own namespace), if readable.
std::optional<pid_t> innermost_pid(const sys::HostRoot& root, pid_t pid) {
  auto text = root.read_file("proc/" + std::to_string(pid) + "/status");
  if (!text) return std::nullopt;
  auto pos = text->find("\nNSpid:");
  if (pos == std::string::npos) return std::nullopt;
  auto end = text->find('\n', pos + 1);
  std::string_view line(text->data() + pos + 7,
                        (end == std::string::npos ? text->size() : end) - pos - 7);
  while (!line.empty() && (line.back() == ' ' || line.back() == '\t')) line.remove_suffix(1);
  auto last = line.find_last_of(" \t");
  return parse_number<pid_t>(last == std::string_view::npos ? line : line.substr(last + 1));
}

class SimBackend final : public GpuBackend {
 public:
  SimBackend(sys::HostRoot root, std::string dir) : root_(std::move(root)), dir_(std::move(dir)) {
    // Fd links show the path as the holders' mount namespace saw it: the host's
    // view, i.e. without our host-root prefix.
    display_dir_ = dir_;
    if (!root_.is_slash() && display_dir_.rfind(root_.path() + "/", 0) == 0) {
      display_dir_.erase(0, root_.path().size());
    }
  }

  [[nodiscard]] std::string_view name() const override { return "sim"; }

  sys::Result<GpuSnapshot> snapshot() override {
    const std::string config_path = dir_ + "/config.json";
    auto text = sys::read_file_at(AT_FDCWD, config_path.c_str(), config_path);
    if (!text) {
      if (text.error().vanished()) return GpuSnapshot{};  // not initialised: no devices
      return text.error();
    }
    auto config = parse_sim_config(*text, config_path);
    if (!config) return config.error();

    auto contexts = list_contexts();
    if (!contexts.empty()) find_holders(contexts);

    GpuSnapshot snap;
    snap.driver_version = config->driver_version;
    for (std::size_t i = 0; i < config->devices.size(); ++i) {
      const auto& dc = config->devices[i];
      GpuDevice d;
      d.index = static_cast<unsigned>(i);
      d.uuid = dc.uuid;
      d.minor = d.index;
      d.name = dc.name;
      GpuMemory mem;
      mem.total = dc.total;
      mem.reserved = dc.reserved;
      std::map<pid_t, std::uint64_t> by_pid;  // NVML merges a pid's contexts on one device
      for (const auto& c : contexts) {
        if (c.name.device != d.index || c.holders.empty()) continue;  // no holder: released
        mem.used += c.bytes;
        by_pid[reported_pid(c)] += c.bytes;
      }
      d.memory = mem;
      for (const auto& [pid, bytes] : by_pid) {
        d.processes.push_back(GpuProcess{static_cast<std::uint32_t>(pid), bytes});
      }
      snap.devices.push_back(std::move(d));
    }
    return snap;
  }

  // The sim driver's nvmlDeviceGetProcessUtilization: a held context whose
  // creator is alive runs at its file's "sm" percent; idle ones (0 %), and those
  // whose creator is gone (an inherited context does no work), are absent, as
  // NVML leaves out processes without utilization. Holders are scanned only
  // when some context is busy.
  sys::Result<std::vector<DeviceUtilization>> process_utilization(std::uint64_t since_us) override {
    const std::string config_path = dir_ + "/config.json";
    auto text = sys::read_file_at(AT_FDCWD, config_path.c_str(), config_path);
    if (!text) {
      if (text.error().vanished()) return std::vector<DeviceUtilization>{};
      return text.error();
    }
    auto config = parse_sim_config(*text, config_path);
    if (!config) return config.error();
    auto contexts = list_contexts();
    contexts.erase(std::remove_if(contexts.begin(), contexts.end(), [](const CtxFile& c) { return c.sm_percent == 0; }),
                   contexts.end());
    if (!contexts.empty()) find_holders(contexts);
    const auto now_us = static_cast<std::uint64_t>(
        std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch())
            .count());
    std::vector<DeviceUtilization> out;
    for (std::size_t i = 0; i < config->devices.size(); ++i) {
      DeviceUtilization d;
      d.index = static_cast<unsigned>(i);
      std::map<pid_t, unsigned> by_pid;
      for (const auto& c : contexts) {
        if (c.name.device != d.index || c.holders.empty()) continue;
        const pid_t pid = reported_pid(c);
        if (std::find(c.holders.begin(), c.holders.end(), pid) == c.holders.end()) continue;  // creator gone
        by_pid[pid] = std::min(100U, by_pid[pid] + c.sm_percent);
      }
      if (now_us > since_us) {
        for (const auto& [pid, sm] : by_pid) {
          d.samples.push_back(UtilizationSample{static_cast<std::uint32_t>(pid), now_us, sm, 0});
        }
      }
      out.push_back(std::move(d));
    }
    return out;
  }

  [[nodiscard]] proc::DeviceMatcher device_matcher() const override {
    proc::DeviceMatcher m;
    const std::string dev = dir_ + "/dev";
    std::vector<std::string> names;
    for_each_entry(AT_FDCWD, dev.c_str(), [&](int, std::string_view n) {
      if (n.rfind("nvidia", 0) == 0) names.emplace_back(n);
    });
    std::sort(names.begin(), names.end());
    // Plain files, so no rdev: the /proc scan matches them by path, the
    // kernel descriptor iterator by inode.
    for (auto& n : names) {
      proc::DeviceNode node{n, display_dir_ + "/dev/" + n, std::nullopt, std::nullopt};
      struct stat st {};
      std::string path = dev;
      path.append("/").append(n);
      if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) {
        node.file = proc::FileId{st.st_dev, st.st_ino};
      }
      m.nodes.push_back(std::move(node));
    }
    return m;
  }

  [[nodiscard]] std::string unavailable_reason() const override {
    const std::string config_path = dir_ + "/config.json";
    struct stat st {};
    if (::stat(config_path.c_str(), &st) != 0) {
      return "sim device not initialised at " + dir_ + " (run `gpureap-worker init-sim --sim-dir " +
             dir_ + "`)";
    }
    return {};
  }

 private:
  std::vector<CtxFile> list_contexts() const {
    std::vector<CtxFile> out;
    const std::string ctx_dir = dir_ + "/ctx";
    for_each_entry(AT_FDCWD, ctx_dir.c_str(), [&](int fd, std::string_view n) {
      auto parsed = sim::parse_context_name(n);
      if (!parsed) return;  // temporaries (".gpu0.tmp-N") and strangers
      const std::string name(n);
      struct stat st {};
      if (::fstatat(fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode))
        return;
      auto content = sys::read_file_at(fd, name.c_str(), name);
      if (!content) return;  // released and removed between listing and reading
      auto body = sim::parse_context_content(*content);
      if (!body) return;
      out.push_back(CtxFile{*parsed, body->bytes, body->sm_percent, st.st_dev, st.st_ino, {}});
    });
    return out;
  }

  // Scans <root>/proc/*/fd. Link text is matched on the file name first (cheap),
  // then confirmed by device and inode, so a path seen through another mount
  // namespace, or a deleted file of the same name, cannot fool it. A holder
  // holds the context file AND its GPU's device file, as a CUDA process holds
  // /dev/nvidiaN: a process that merely opened the context file to read it (a
  // concurrent snapshot reading the byte count) holds no context.
  void find_holders(std::vector<CtxFile>& contexts) const {
    std::unordered_map<std::string, std::size_t> by_name;
    for (std::size_t i = 0; i < contexts.size(); ++i)
      by_name.emplace(sim::context_name(contexts[i].name), i);
    // The device files the contexts need: "nvidia<I>" → its identity.
    std::unordered_map<std::string, std::pair<unsigned, std::pair<dev_t, ino_t>>> devices;
    for (const auto& c : contexts) {
      const std::string name = "nvidia" + std::to_string(c.name.device);
      if (devices.count(name) != 0) continue;
      struct stat st {};
      const std::string path = dir_ + "/dev/" + name;
      if (::stat(path.c_str(), &st) == 0)
        devices.emplace(name, std::make_pair(c.name.device, std::make_pair(st.st_dev, st.st_ino)));
    }
    for_each_entry(root_.dir_fd(), "proc", [&](int proc_fd, std::string_view pid_name) {
      auto pid = parse_number<pid_t>(pid_name);
      if (!pid) return;
      const std::string fd_rel = std::string(pid_name) + "/fd";
      std::vector<std::size_t> held;      // contexts whose file this process holds
      std::vector<unsigned> device_held;  // device files it holds
      // Vanished processes and ones we may not inspect are skipped (DESIGN: normal).
      for_each_entry(proc_fd, fd_rel.c_str(), [&](int fd_dir, std::string_view fd_name) {
        const std::string fdn(fd_name);
        char buf[PATH_MAX];
        ssize_t len = ::readlinkat(fd_dir, fdn.c_str(), buf, sizeof buf);
        if (len <= 0) return;
        std::string_view link(buf, static_cast<std::size_t>(len));
        auto slash = link.rfind('/');
        if (slash == std::string_view::npos) return;
        const std::string base(link.substr(slash + 1));
        auto ctx = by_name.find(base);
        auto dev = ctx == by_name.end() ? devices.find(base) : devices.end();
        if (ctx == by_name.end() && dev == devices.end()) return;
        struct stat st {};
        if (::fstatat(fd_dir, fdn.c_str(), &st, 0) != 0) return;
        if (ctx != by_name.end()) {
          const CtxFile& c = contexts[ctx->second];
          if (st.st_dev == c.dev && st.st_ino == c.ino) held.push_back(ctx->second);
        } else if (st.st_dev == dev->second.second.first &&
                   st.st_ino == dev->second.second.second) {
          device_held.push_back(dev->second.first);
        }
      });
      for (std::size_t i : held) {
        CtxFile& c = contexts[i];
        const bool has_device =
            std::find(device_held.begin(), device_held.end(), c.name.device) != device_held.end();
        if (has_device && std::find(c.holders.begin(), c.holders.end(), *pid) == c.holders.end()) {
          c.holders.push_back(*pid);
        }
      }
    });
  }

  // The creator's pid as the driver lists it. The file name has the pid the
  // creator saw for itself; when the creator is alive inside a PID namespace,
  // report its pid in our /proc instead (NVML reports the caller's view).
  pid_t reported_pid(const CtxFile& c) const {
    const pid_t creator = c.name.creator;
    if (std::find(c.holders.begin(), c.holders.end(), creator) != c.holders.end()) return creator;
    for (pid_t h : c.holders) {
      if (auto inner = innermost_pid(root_, h); inner && *inner == creator && h != creator)
        return h;
    }
    return creator;  // creator gone: the driver keeps listing its (dead) pid
  }

  sys::HostRoot root_;
  std::string dir_;
  std::string display_dir_;
};

std::string absolute(std::string path) {
  if (!path.empty() && path.front() == '/') return path;
  char cwd[PATH_MAX];
  if (::getcwd(cwd, sizeof cwd) == nullptr) return path;
  return std::string(cwd) + "/" + path;
}

}  // namespace

sys::Result<sim::Config> parse_sim_config(std::string_view text, std::string_view what) {
  const std::string w(what);
  auto fail = [&](const std::string& field, const char* problem) {
    return sys::Error{EINVAL, w + ": " + field + ": " + problem};
  };
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    return sys::Error{EINVAL, w + ": not valid JSON (at byte " + std::to_string(e.byte) + ")"};
  } catch (const json::exception& e) {
    // Well-formed text the library still refuses: a number too large for a
    // double (out_of_range), say. Found by the fuzzer; must not abort.
    return sys::Error{EINVAL, w + ": not usable JSON (" + e.what() + ")"};
  }
  if (!doc.is_object()) return fail("(top level)", "expected an object");
  sim::Config c;
  auto v = doc.find("driver_version");
  if (v == doc.end() || !v->is_string()) return fail("driver_version", "expected a string");
  c.driver_version = v->get<std::string>();
  auto devs = doc.find("devices");
  if (devs == doc.end() || !devs->is_array()) return fail("devices", "expected an array");
  for (std::size_t i = 0; i < devs->size(); ++i) {
    const json& d = (*devs)[i];
    const std::string p = "devices[" + std::to_string(i) + "]";
    if (!d.is_object()) return fail(p, "expected an object");
    sim::DeviceConfig dc;
    for (const char* key : {"name", "uuid"}) {
      auto f = d.find(key);
      if (f == d.end() || !f->is_string()) return fail(p + "." + key, "expected a string");
      (std::string_view(key) == "name" ? dc.name : dc.uuid) = f->get<std::string>();
    }
    for (const char* key : {"total", "reserved"}) {
      auto f = d.find(key);
      if (f == d.end() || !f->is_number_unsigned())
        return fail(p + "." + key, "expected an unsigned integer");
      (std::string_view(key) == "total" ? dc.total : dc.reserved) = f->get<std::uint64_t>();
    }
    c.devices.push_back(std::move(dc));
  }
  return c;
}

std::unique_ptr<GpuBackend> make_sim_backend(const sys::HostRoot& root, const SimOptions& options) {
  std::string dir = absolute(sim::resolve_sim_dir(options.dir, root.path()));
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  return std::make_unique<SimBackend>(root, std::move(dir));
}

}  // namespace gpureap::gpu
