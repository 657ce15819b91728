// The simulated GPU, client side: what a "CUDA process" does to the sim device.
// Kept free of JSON and of the rest of the GPU layer so the static
// gpureap-worker can link it alone.
//
// Sim directory layout (default <host root>/run/gpureap/sim, env GPUREAP_SIM_DIR):
//   config.json                  driver version and devices (written once by init_sim_dir)
//   dev/nvidia0..N-1, dev/nvidiactl, dev/nvidia-uvm
//                                plain files standing in for the device nodes
//   ctx/gpu<I>-pid<P>-<n>        one context: created by pid P on device I; content =
//                                the bytes it holds, in decimal, then '\n'; then
//                                optionally "sm <percent>\n": the SM utilization
//                                its creator runs at while alive (default 0: idle)
// A context is held while any process holds descriptors of both its file and
// its device file dev/nvidia<I> (fork-inherited ones included), as the real
// driver holds device memory while any descriptor of the context is open
// (FACTS.md) and a context on GPU N lives in descriptors of /dev/nvidiaN; a
// process that only opens the context file (to read its byte count) holds
// nothing. Its name keeps the creator's pid after the creator dies, as NVML
// keeps listing the dead creator. Like a CUDA process, a context's holder maps
// its device files (dev/nvidiaN and dev/nvidia-uvm, one page each), and a
// forked child inherits the mappings; a driver client without a context (an
// NVML monitor) only opens them.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sys/error.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::gpu::sim {

inline constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

struct DeviceConfig {
  std::string name = "Simulated H200";
  std::string uuid;                          // "GPU-..."
  std::uint64_t total = 143771ULL * kMiB;    // an H200's nvmlMemory_v2 total
  std::uint64_t reserved = 615ULL * kMiB;    // measured on an idle H200 (FACTS.md)
  bool operator==(const DeviceConfig&) const = default;
};

struct Config {
  std::string driver_version = "sim-580.159.04";
  std::vector<DeviceConfig> devices;
  bool operator==(const Config&) const = default;
};

// `count` devices with stable uuids (GPU-51300000-0000-4000-8000-00000000000<i>).
Config default_config(unsigned count);

// The config in the fixed layout the backend parses; written here by hand so
// the client needs no JSON library.
std::string config_to_json_text(const Config& config);

// --sim-dir flag, else $GPUREAP_SIM_DIR, else <host_root>/run/gpureap/sim.
std::string resolve_sim_dir(const std::optional<std::string>& flag, std::string_view host_root);

// Creates the directory tree, the dev/ files and config.json. Idempotent and
// safe against a concurrent init: an existing config.json is kept as it is
// (the first writer wins), so a second init with another count changes nothing.
sys::Status init_sim_dir(const std::string& dir, const Config& config);

// One shared mapping of a device file, unmapped when destroyed.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* address, std::size_t length) : address_(address), length_(length) {}
  Mapping(Mapping&& other) noexcept
      : address_(std::exchange(other.address_, nullptr)),
        length_(std::exchange(other.length_, 0)) {}
  Mapping& operator=(Mapping&& other) noexcept;
  Mapping(const Mapping&) = delete;
  Mapping& operator=(const Mapping&) = delete;
  ~Mapping();

 private:
  void* address_ = nullptr;
  std::size_t length_ = 0;
};

// A context held by this process. Its descriptors are NOT close-on-exec and
// not close-on-fork: a forked child inherits them and with them the context.
// Destroying a Context closes this process's descriptors and mappings (like
// process exit); release() is cuCtxDestroy: the context is gone even if a
// child still holds it.
class Context {
 public:
  Context() = default;
  Context(Context&&) noexcept = default;
  Context& operator=(Context&&) noexcept = default;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context() = default;

  [[nodiscard]] const std::string& path() const { return path_; }  // ctx file
  [[nodiscard]] unsigned device() const { return device_; }
  [[nodiscard]] std::uint64_t bytes() const { return bytes_; }
  [[nodiscard]] unsigned sm_percent() const { return sm_percent_; }
  [[nodiscard]] int fd() const { return ctx_fd_.get(); }
  [[nodiscard]] bool held() const { return ctx_fd_.valid(); }

  // Unlinks the ctx file and closes this process's descriptors and mappings.
  sys::Status release();

 private:
  friend sys::Result<Context> create_context(const std::string& dir, unsigned device_index, std::uint64_t bytes,
                                             unsigned sm_percent);
  std::string path_;
  unsigned device_ = 0;
  std::uint64_t bytes_ = 0;
  unsigned sm_percent_ = 0;
  sys::UniqueFd ctx_fd_;
  std::vector<sys::UniqueFd> device_fds_;  // dev/nvidiaN, nvidiactl, nvidia-uvm
  std::vector<Mapping> mappings_;          // dev/nvidiaN, nvidia-uvm
};

// Creates ctx/gpu<device_index>-pid<getpid()>-<n> (first free n) holding `bytes`
// and opens the device files like a CUDA process. Fails when the sim dir has no
// dev/nvidia<device_index> (not initialised, or no such device). `sm_percent`
// (0-100) is the SM utilization the sim driver reports for it while its
// creator lives.
sys::Result<Context> create_context(const std::string& dir, unsigned device_index, std::uint64_t bytes,
                                    unsigned sm_percent = 0);

// A context file's content, parsed: "<bytes>\n" then optional "sm <percent>\n".
struct ContextContent {
  std::uint64_t bytes = 0;
  unsigned sm_percent = 0;
  bool operator==(const ContextContent&) const = default;
};
std::optional<ContextContent> parse_context_content(std::string_view text);

// The name of a context file, parsed: "gpu0-pid123-4" -> {0, 123, 4}.
struct ContextName {
  unsigned device = 0;
  pid_t creator = 0;
  unsigned serial = 0;
  bool operator==(const ContextName&) const = default;
};
std::optional<ContextName> parse_context_name(std::string_view name);
std::string context_name(const ContextName& name);

}  // namespace gpureap::gpu::sim
