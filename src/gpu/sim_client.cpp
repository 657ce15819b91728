#include "gpu/sim_client.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>

#include "sys/parse_number.hpp"

namespace gpureap::gpu::sim {

namespace {

sys::Status mkdir_p(const std::string& path) {
  std::string partial;
  std::size_t pos = 0;
  while (pos != std::string::npos) {
    pos = path.find('/', pos + 1);
    partial = path.substr(0, pos);
    if (partial.empty() || partial == "/") continue;
    if (::mkdir(partial.c_str(), 0755) != 0 && errno != EEXIST) {
      return sys::errno_error(errno, "mkdir " + partial);
    }
  }
  return sys::Ok{};
}

sys::Status touch(const std::string& path) {
  // 0666 whatever the umask: workers in containers under other uids open the
  // same sim device, as every user may open /dev/nvidia*.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0666);
  if (fd < 0) return sys::errno_error(errno, "create " + path);
  const int rc = ::fchmod(fd, 0666);
  const int saved = errno;
  ::close(fd);
  if (rc != 0) return sys::errno_error(saved, "chmod " + path);
  return sys::Ok{};
}

sys::Status write_whole(int fd, std::string_view text, const std::string& what) {
  while (!text.empty()) {
    ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return sys::errno_error(errno, "write " + what);
    }
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return sys::Ok{};
}

// Writes a temporary file that the caller then links into place; readers never
// see a half-written file under the final name.
sys::Result<std::string> write_temp(const std::string& dir, std::string_view stem, std::string_view text) {
  std::string tmp = dir + "/." + std::string(stem) + ".tmp-" + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sys::errno_error(errno, "create " + tmp);
  sys::UniqueFd owned(fd);
  if (auto st = write_whole(fd, text, tmp); !st) {
    ::unlink(tmp.c_str());
    return st.error();
  }
  return tmp;
}

std::string json_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out.push_back('\\');
      out.push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      (void)std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
    } else {
      out.push_back(c);
    }
  }
  return out;
}

using sys::parse_number;

sys::Result<sys::UniqueFd> open_device_file(const std::string& path) {
  // Deliberately no O_CLOEXEC: a forked/exec'd child inherits the device, as with CUDA.
  int fd = ::open(path.c_str(), O_RDWR);  // NOLINT(android-cloexec-open)
  if (fd < 0) return sys::errno_error(errno, "open sim device " + path);
  return sys::UniqueFd(fd);
}

}  // namespace

Config default_config(unsigned count) {
  Config c;
  for (unsigned i = 0; i < count; ++i) {
    DeviceConfig d;
    char uuid[64];
    (void)std::snprintf(uuid, sizeof uuid, "GPU-51300000-0000-4000-8000-%012x", i);
    d.uuid = uuid;
    c.devices.push_back(std::move(d));
  }
  return c;
}

std::string config_to_json_text(const Config& config) {
  std::string out = "{\"driver_version\": \"" + json_escape(config.driver_version) + "\", \"devices\": [";
  for (std::size_t i = 0; i < config.devices.size(); ++i) {
    const auto& d = config.devices[i];
    if (i != 0) out += ", ";
    out += "{\"index\": " + std::to_string(i) + ", \"name\": \"" + json_escape(d.name) + "\", \"uuid\": \"" +
           json_escape(d.uuid) + "\", \"total\": " + std::to_string(d.total) +
           ", \"reserved\": " + std::to_string(d.reserved) + "}";
  }
  out += "]}\n";
  return out;
}

std::string resolve_sim_dir(const std::optional<std::string>& flag, std::string_view host_root) {
  if (flag && !flag->empty()) return *flag;
  if (const char* env = std::getenv("GPUREAP_SIM_DIR"); env != nullptr && *env != '\0') return env;
  std::string root(host_root.empty() ? "/" : host_root);
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return (root == "/" ? std::string() : root) + "/run/gpureap/sim";
}

sys::Status init_sim_dir(const std::string& dir, const Config& config) {
  if (auto st = mkdir_p(dir + "/dev"); !st) return st;
  if (auto st = mkdir_p(dir + "/ctx"); !st) return st;
  const std::string config_path = dir + "/config.json";
  struct stat sb {};
  if (::stat(config_path.c_str(), &sb) == 0) return sys::Ok{};
  // Device files first, config last: a reader that sees config.json sees the devices.
  for (std::size_t i = 0; i < config.devices.size(); ++i) {
    if (auto st = touch(dir + "/dev/nvidia" + std::to_string(i)); !st) return st;
  }
  if (auto st = touch(dir + "/dev/nvidiactl"); !st) return st;
  if (auto st = touch(dir + "/dev/nvidia-uvm"); !st) return st;
  auto tmp = write_temp(dir, "config.json", config_to_json_text(config));
  if (!tmp) return tmp.error();
  // link() fails with EEXIST when a concurrent init won: keep the winner's config.
  int rc = ::link(tmp->c_str(), config_path.c_str());
  int saved = errno;
  ::unlink(tmp->c_str());
  if (rc != 0 && saved != EEXIST) return sys::errno_error(saved, "link " + config_path);
  return sys::Ok{};
}

std::optional<ContextName> parse_context_name(std::string_view name) {
  // gpu<I>-pid<P>-<n>
  if (name.substr(0, 3) != "gpu") return std::nullopt;
  name.remove_prefix(3);
  auto dash = name.find("-pid");
  if (dash == std::string_view::npos) return std::nullopt;
  auto device = parse_number<unsigned>(name.substr(0, dash));
  name.remove_prefix(dash + 4);
  auto dash2 = name.find('-');
  if (dash2 == std::string_view::npos) return std::nullopt;
  auto creator = parse_number<pid_t>(name.substr(0, dash2));
  auto serial = parse_number<unsigned>(name.substr(dash2 + 1));
  if (!device || !creator || !serial || *creator <= 0) return std::nullopt;
  return ContextName{*device, *creator, *serial};
}

std::string context_name(const ContextName& name) {
  return "gpu" + std::to_string(name.device) + "-pid" + std::to_string(name.creator) + "-" +
         std::to_string(name.serial);
}

std::optional<ContextContent> parse_context_content(std::string_view text) {
  ContextContent out;
  bool first = true;
  while (!text.empty()) {
    const auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text.remove_prefix(nl == std::string_view::npos ? text.size() : nl + 1);
    while (!line.empty() && (line.back() == ' ' || line.back() == '\r')) line.remove_suffix(1);
    if (first) {
      auto bytes = parse_number<std::uint64_t>(line);
      if (!bytes) return std::nullopt;
      out.bytes = *bytes;
      first = false;
    } else if (line.substr(0, 3) == "sm ") {
      auto sm = parse_number<unsigned>(line.substr(3));
      if (!sm || *sm > 100) return std::nullopt;
      out.sm_percent = *sm;
    } else if (!line.empty()) {
      return std::nullopt;
    }
  }
  if (first) return std::nullopt;
  return out;
}

sys::Result<Context> create_context(const std::string& dir, unsigned device_index, std::uint64_t bytes,
                                    unsigned sm_percent) {
  if (sm_percent > 100) return sys::Error{EINVAL, "sm utilization " + std::to_string(sm_percent) + " % is over 100"};
  Context ctx;
  ctx.device_ = device_index;
  ctx.bytes_ = bytes;
  ctx.sm_percent_ = sm_percent;
  // Device files first: a missing device fails before anything is created.
  for (const std::string& name : {"nvidia" + std::to_string(device_index), std::string("nvidiactl"),
                                 std::string("nvidia-uvm")}) {
    std::string path = dir;
    path.append("/dev/").append(name);
    auto fd = open_device_file(path);
    if (!fd) {
      auto err = fd.error();
      if (err.code == ENOENT) err.message += " (no such sim device; run `gpureap-worker init-sim`?)";
      return err;
    }
    ctx.device_fds_.push_back(std::move(*fd));
  }
  // Mapped like a CUDA process maps its GPU and UVM nodes (the files are empty:
  // the pages are never touched, only seen in /proc/PID/maps).
  const std::size_t page = static_cast<std::size_t>(::sysconf(_SC_PAGESIZE));
  for (std::size_t i : {std::size_t{0}, std::size_t{2}}) {
    void* at = ::mmap(nullptr, page, PROT_READ, MAP_SHARED, ctx.device_fds_[i].get(), 0);
    if (at == MAP_FAILED) return sys::errno_error(errno, "mmap a sim device file of " + dir);
    ctx.mappings_.emplace_back(at, page);
  }
  const std::string ctx_dir = dir + "/ctx";
  const pid_t self = ::getpid();
  std::string content = std::to_string(bytes) + "\n";
  if (sm_percent != 0) content += "sm " + std::to_string(sm_percent) + "\n";
  auto tmp = write_temp(ctx_dir, "gpu" + std::to_string(device_index), content);
  if (!tmp) return tmp.error();
  // First free serial: a reused pid must not collide with a stale file of its predecessor.
  for (unsigned serial = 0;; ++serial) {
    std::string path = ctx_dir + "/" + context_name({device_index, self, serial});
    if (::link(tmp->c_str(), path.c_str()) == 0) {
      ctx.path_ = std::move(path);
      break;
    }
    if (errno != EEXIST || serial > 100000) {
      auto err = sys::errno_error(errno, "link " + path);
      ::unlink(tmp->c_str());
      return err;
    }
  }
  ::unlink(tmp->c_str());
  // Opened under its final name so /proc/<pid>/fd shows that name. Not O_CLOEXEC: inheritable.
  int fd = ::open(ctx.path_.c_str(), O_RDONLY);  // NOLINT(android-cloexec-open)
  if (fd < 0) {
    auto err = sys::errno_error(errno, "open " + ctx.path_);
    ::unlink(ctx.path_.c_str());
    return err;
  }
  ctx.ctx_fd_.reset(fd);
  return ctx;
}

sys::Status Context::release() {
  if (!ctx_fd_.valid()) return sys::Ok{};
  sys::Status result = sys::Ok{};
  if (::unlink(path_.c_str()) != 0 && errno != ENOENT) result = sys::errno_error(errno, "unlink " + path_);
  ctx_fd_.reset();
  device_fds_.clear();
  mappings_.clear();
  return result;
}

Mapping& Mapping::operator=(Mapping&& other) noexcept {
  if (this != &other) {
    if (address_ != nullptr) ::munmap(address_, length_);
    address_ = std::exchange(other.address_, nullptr);
    length_ = std::exchange(other.length_, 0);
  }
  return *this;
}

Mapping::~Mapping() {
  if (address_ != nullptr) ::munmap(address_, length_);
}

}  // namespace gpureap::gpu::sim
