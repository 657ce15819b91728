// The NVML backend in one file: our own minimal NVML declarations (no NVIDIA
// headers, so the tool builds anywhere and runs where no driver is installed),
// libnvidia-ml loaded with dlopen, versioned symbols with fallbacks, optional
// symbols nullable, and a validity bit (std::optional) per value so that
// "unsupported" is never shown as 0. Layout facts: /work/shared/FACTS.md
// ("NVML without NVIDIA headers").
//
// Hang safety: a lost GPU can make an NVML call block forever. Every batch of
// NVML calls (init, one snapshot, shutdown) runs on its own worker thread and
// the caller waits at most NvmlOptions::call_timeout. On timeout the worker is
// detached and the library is marked abandoned: it is never called again,
// never shut down and never dlclose'd, because the stuck thread's instruction
// pointer is inside libnvidia-ml and unmapping its code would crash the
// process the moment the call returns. The worker shares the library and its
// progress record through shared_ptr, so it never touches freed memory even
// after the backend object is gone.
#include "gpu/nvml_backend.hpp"

#include "gpu/device_nodes.hpp"

#include <dlfcn.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

namespace gpureap::gpu {
namespace {

// ---------------------------------------------------------------------------
// Minimal NVML declarations (x86-64 ABI, from FACTS.md).
namespace nvml {

using Return = int;  // nvmlReturn_t is a C enum: int-sized
struct DeviceOpaque;
using Device = DeviceOpaque*;  // nvmlDevice_t is an opaque pointer

constexpr Return kSuccess = 0;
constexpr Return kErrorInvalidArgument = 2;
constexpr Return kErrorNotSupported = 3;
constexpr Return kErrorNotFound = 6;
constexpr Return kErrorInsufficientSize = 7;
constexpr Return kErrorFunctionNotFound = 13;

struct ProcessInfoV1 {  // nvmlProcessInfo_v1_t: the plain (unversioned) calls
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct ProcessInfoV2 {  // nvmlProcessInfo_v2_t, also used by the _v3 calls
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
struct Memory {  // nvmlMemory_t
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;  // includes reserved memory
};
struct MemoryV2 {  // nvmlMemory_v2_t
  unsigned int version;
  unsigned long long total;
  unsigned long long reserved;
  unsigned long long free;
  unsigned long long used;  // excludes reserved memory
};

struct ProcessUtilizationSample {  // nvmlProcessUtilizationSample_t
  unsigned int pid;
  unsigned long long timeStamp;  // CPU time, microseconds
  unsigned int smUtil;
  unsigned int memUtil;
  unsigned int encUtil;
  unsigned int decUtil;
};
static_assert(sizeof(ProcessUtilizationSample) == 32 && offsetof(ProcessUtilizationSample, timeStamp) == 8 &&
              offsetof(ProcessUtilizationSample, smUtil) == 16 && offsetof(ProcessUtilizationSample, memUtil) == 20);

static_assert(sizeof(ProcessInfoV1) == 16 && offsetof(ProcessInfoV1, usedGpuMemory) == 8);
static_assert(sizeof(ProcessInfoV2) == 24 && offsetof(ProcessInfoV2, usedGpuMemory) == 8 &&
              offsetof(ProcessInfoV2, gpuInstanceId) == 16 &&
              offsetof(ProcessInfoV2, computeInstanceId) == 20);
static_assert(sizeof(Memory) == 24 && offsetof(Memory, used) == 16);
static_assert(sizeof(MemoryV2) == 40 && offsetof(MemoryV2, total) == 8 &&
              offsetof(MemoryV2, reserved) == 16 && offsetof(MemoryV2, free) == 24 &&
              offsetof(MemoryV2, used) == 32);

// NVML_STRUCT_VERSION(Memory, 2): size in the low bits, version in the top byte.
constexpr unsigned int kMemoryV2Version = static_cast<unsigned int>(sizeof(MemoryV2)) | (2U << 24U);
static_assert(kMemoryV2Version == 0x02000028U);

constexpr unsigned long long kValueNotAvailable = ~0ULL;  // usedGpuMemory unknown
constexpr unsigned int kDriverVersionBufferSize = 80;
constexpr unsigned int kUuidBufferSize = 96;
constexpr unsigned int kNameBufferSize = 96;
// Drivers 535.43–535.86 wrote 32-byte entries for the _v3 calls; every process
// buffer gets room for that many bytes per entry so such a driver cannot
// overflow it before the stride check rejects the list.
constexpr std::size_t kLargestEntryWritten = 32;

using InitFn = Return (*)();
using ShutdownFn = Return (*)();
using ErrorStringFn = const char* (*)(Return);
using DriverVersionFn = Return (*)(char*, unsigned int);
using CountFn = Return (*)(unsigned int*);
using HandleFn = Return (*)(unsigned int, Device*);
using StringFn = Return (*)(Device, char*, unsigned int);
using MinorFn = Return (*)(Device, unsigned int*);
using MemoryV1Fn = Return (*)(Device, Memory*);
using MemoryV2Fn = Return (*)(Device, MemoryV2*);
using ProcessesV1Fn = Return (*)(Device, unsigned int*, ProcessInfoV1*);
using ProcessesV2Fn = Return (*)(Device, unsigned int*, ProcessInfoV2*);
using UtilizationFn = Return (*)(Device, ProcessUtilizationSample*, unsigned int*, unsigned long long);

// Names of the codes in FACTS.md, for libraries without nvmlErrorString.
const char* fallback_error_name(Return rc) {
  switch (rc) {
    case 0: return "Success";
    case 1: return "Uninitialized";
    case 2: return "Invalid Argument";
    case 3: return "Not Supported";
    case 4: return "Insufficient Permissions";
    case 6: return "Not Found";
    case 7: return "Insufficient Size";
    case 9: return "Driver Not Loaded";
    case 12: return "NVML Shared Library Not Found";
    case 13: return "Function Not Found";
    case 15: return "GPU is lost";
    case 18: return "Driver/library version mismatch";
    case 999: return "Unknown Error";
    default: return nullptr;
  }
}

}  // namespace nvml

// One way to list a device's processes: a symbol and the entry layout it fills.
struct ProcessQuery {
  std::string name;
  nvml::ProcessesV2Fn wide = nullptr;    // _v3 / _v2: 24-byte entries
  nvml::ProcessesV1Fn narrow = nullptr;  // plain: 16-byte entries
};

// The loaded library and its function table. Owned by the backend and shared
// with worker threads (see the top of the file).
struct Library {
  void* handle = nullptr;
  std::string file;  // the name that loaded

  std::string init_name, count_name, handle_name;
  nvml::InitFn init = nullptr;
  nvml::CountFn get_count = nullptr;
  nvml::HandleFn get_handle = nullptr;
  // Optional: nullptr when the library does not export them.
  nvml::ShutdownFn shutdown = nullptr;
  nvml::ErrorStringFn error_string = nullptr;
  nvml::DriverVersionFn driver_version = nullptr;
  nvml::StringFn get_uuid = nullptr;
  nvml::StringFn get_name = nullptr;
  nvml::MinorFn get_minor = nullptr;
  nvml::MemoryV2Fn memory_v2 = nullptr;
  nvml::MemoryV1Fn memory_v1 = nullptr;
  std::vector<ProcessQuery> compute;   // newest first
  std::vector<ProcessQuery> graphics;  // newest first
  nvml::UtilizationFn process_utilization = nullptr;

  std::atomic<bool> initialized{false};  // nvmlInit succeeded: nvmlShutdown is owed
  std::atomic<bool> abandoned{false};    // a call timed out: never call, shut down or unload

  Library() = default;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library() {
    if (handle != nullptr && !abandoned.load()) dlclose(handle);
  }

  [[nodiscard]] std::string describe(nvml::Return rc) const {
    const char* text = error_string != nullptr ? error_string(rc) : nullptr;
    if (text == nullptr || *text == '\0') text = nvml::fallback_error_name(rc);
    std::string out = text != nullptr ? text : "unknown NVML error";
    out += " (NVML code " + std::to_string(rc) + ")";
    return out;
  }
};

template <class Fn>
Fn find_symbol(void* handle, const char* name) {
  // dlsym returns an object pointer; POSIX guarantees it converts to a function pointer.
  return reinterpret_cast<Fn>(dlsym(handle, name));
}

// Looks up the first of `names` the library exports; records which one.
template <class Fn>
Fn find_first(void* handle, std::initializer_list<const char*> names, std::string* found = nullptr) {
  for (const char* name : names) {
    if (auto fn = find_symbol<Fn>(handle, name)) {
      if (found != nullptr) *found = name;
      return fn;
    }
  }
  return nullptr;
}

std::vector<ProcessQuery> process_queries(void* handle, const std::string& base) {
  std::vector<ProcessQuery> out;
  for (const char* suffix : {"_v3", "_v2"}) {
    std::string name = base + suffix;
    if (auto fn = find_symbol<nvml::ProcessesV2Fn>(handle, name.c_str())) {
      out.push_back(ProcessQuery{name, fn, nullptr});
    }
  }
  if (auto fn = find_symbol<nvml::ProcessesV1Fn>(handle, base.c_str())) {
    out.push_back(ProcessQuery{base, nullptr, fn});
  }
  return out;
}

// Loads the first library that opens and resolves its symbols. On failure the
// string says why, for unavailable_reason().
std::pair<std::shared_ptr<Library>, std::string> load_library(const std::vector<std::string>& names) {
  std::string errors;
  bool opened_one = false;  // something loaded but was not NVML
  for (const auto& name : names) {
    // RTLD_LOCAL: NVML's symbols stay out of the global namespace; RTLD_NOW:
    // a broken install fails here, not at the first call.
    void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle == nullptr) {
      const char* why = dlerror();
      if (!errors.empty()) errors += "; ";
      errors += why != nullptr ? why : name + ": cannot be loaded";
      continue;
    }
    auto lib = std::make_shared<Library>();
    lib->handle = handle;
    lib->file = name;
    lib->init = find_first<nvml::InitFn>(handle, {"nvmlInit_v2", "nvmlInit"}, &lib->init_name);
    lib->get_count =
        find_first<nvml::CountFn>(handle, {"nvmlDeviceGetCount_v2", "nvmlDeviceGetCount"}, &lib->count_name);
    lib->get_handle = find_first<nvml::HandleFn>(
        handle, {"nvmlDeviceGetHandleByIndex_v2", "nvmlDeviceGetHandleByIndex"}, &lib->handle_name);
    if (lib->init == nullptr || lib->get_count == nullptr || lib->get_handle == nullptr) {
      std::string missing = lib->init == nullptr        ? "nvmlInit"
                            : lib->get_count == nullptr ? "nvmlDeviceGetCount"
                                                        : "nvmlDeviceGetHandleByIndex";
      // Not a usable libnvidia-ml (a stub, say): try the next name.
      opened_one = true;
      if (!errors.empty()) errors += "; ";
      errors += name + " exports no " + missing;
      continue;  // `lib` unloads it
    }
    lib->shutdown = find_symbol<nvml::ShutdownFn>(handle, "nvmlShutdown");
    lib->error_string = find_symbol<nvml::ErrorStringFn>(handle, "nvmlErrorString");
    lib->driver_version = find_symbol<nvml::DriverVersionFn>(handle, "nvmlSystemGetDriverVersion");
    lib->get_uuid = find_symbol<nvml::StringFn>(handle, "nvmlDeviceGetUUID");
    lib->get_name = find_symbol<nvml::StringFn>(handle, "nvmlDeviceGetName");
    lib->get_minor = find_symbol<nvml::MinorFn>(handle, "nvmlDeviceGetMinorNumber");
    lib->memory_v2 = find_symbol<nvml::MemoryV2Fn>(handle, "nvmlDeviceGetMemoryInfo_v2");
    lib->memory_v1 = find_symbol<nvml::MemoryV1Fn>(handle, "nvmlDeviceGetMemoryInfo");
    lib->compute = process_queries(handle, "nvmlDeviceGetComputeRunningProcesses");
    lib->graphics = process_queries(handle, "nvmlDeviceGetGraphicsRunningProcesses");
    lib->process_utilization = find_symbol<nvml::UtilizationFn>(handle, "nvmlDeviceGetProcessUtilization");
    return {std::move(lib), {}};
  }
  std::string first = names.empty() ? std::string("libnvidia-ml") : names.front();
  return {nullptr, "NVML: " + first + (opened_one ? " not usable (" : " not found (") + errors + ")"};
}

// ---------------------------------------------------------------------------
// Bounded calls.

// What a worker shares with the thread waiting for it.
template <class T>
struct Job {
  std::mutex mutex;
  std::condition_variable finished;
  std::optional<T> result;
  std::string call = "(no call yet)";  // the NVML call in progress, for the timeout message
};

// Handed to the work function: names each NVML call before it is made, and
// stops the work once the waiter has given up.
template <class T>
class Calls {
 public:
  Calls(Library& lib, Job<T>& job) : lib_(lib), job_(job) {}
  Library& lib() { return lib_; }
  // False when the waiter timed out: the work must return without further calls.
  bool enter(std::string call) {
    std::lock_guard lock(job_.mutex);
    job_.call = std::move(call);
    return !lib_.abandoned.load();
  }

 private:
  Library& lib_;
  Job<T>& job_;
};

// Runs `work` on its own thread and waits at most `timeout`. nullopt = timed
// out; then `stuck_call` names the call in progress and the library is
// abandoned (see the top of the file).
template <class T>
std::optional<T> run_bounded(const std::shared_ptr<Library>& lib, std::chrono::milliseconds timeout,
                             std::function<T(Calls<T>&)> work, std::string& stuck_call) {
  auto job = std::make_shared<Job<T>>();
  std::thread worker;
  try {
    // Captures only shared state, so an abandoned worker outlives everything safely.
    worker = std::thread([lib, job, work = std::move(work)] {
      Calls<T> calls(*lib, *job);
      T value = work(calls);
      std::lock_guard lock(job->mutex);
      job->result.emplace(std::move(value));
      job->finished.notify_all();
    });
  } catch (const std::system_error& e) {
    stuck_call.clear();
    return T::thread_failed(e.what());
  }
  std::unique_lock lock(job->mutex);
  if (job->finished.wait_for(lock, timeout, [&job] { return job->result.has_value(); })) {
    lock.unlock();
    worker.join();
    return std::move(job->result);
  }
  lib->abandoned.store(true);
  stuck_call = job->call;
  lock.unlock();
  worker.detach();
  return std::nullopt;
}

std::string timeout_message(const std::string& call, std::chrono::milliseconds timeout) {
  return "NVML: " + call + " did not return within " + std::to_string(timeout.count()) +
         " ms; the GPU may be lost (NVML is not called again by this process)";
}

// ---------------------------------------------------------------------------
// The work itself (runs on worker threads).

struct InitOutcome {
  std::string reason;           // empty: NVML is up and reports devices
  std::vector<unsigned> minors;  // known /dev/nvidiaN numbers
  static InitOutcome thread_failed(const char* what) {
    return InitOutcome{std::string("NVML: cannot start a thread: ") + what, {}};
  }
};

InitOutcome do_init(Calls<InitOutcome>& calls) {
  Library& lib = calls.lib();
  InitOutcome out;
  if (!calls.enter(lib.init_name)) return out;
  nvml::Return rc = lib.init();
  if (rc != nvml::kSuccess) {
    // 9 = driver not loaded, 12 = library not found, 18 = library/driver mismatch, ...
    out.reason = "NVML: " + lib.init_name + " failed: " + lib.describe(rc);
    return out;
  }
  lib.initialized.store(true);
  unsigned count = 0;
  if (!calls.enter(lib.count_name)) return out;
  rc = lib.get_count(&count);
  if (rc != nvml::kSuccess) {
    out.reason = "NVML: " + lib.count_name + " failed: " + lib.describe(rc);
    return out;
  }
  if (count == 0) {
    out.reason = "NVML: the driver reports no GPUs";
    return out;
  }
  // Minors are read once here so device_matcher() needs no NVML call.
  for (unsigned i = 0; i < count && lib.get_minor != nullptr; ++i) {
    nvml::Device dev = nullptr;
    if (!calls.enter(lib.handle_name + "(" + std::to_string(i) + ")")) return out;
    if (lib.get_handle(i, &dev) != nvml::kSuccess) continue;
    unsigned minor = 0;
    if (!calls.enter("nvmlDeviceGetMinorNumber(GPU " + std::to_string(i) + ")")) return out;
    if (lib.get_minor(dev, &minor) == nvml::kSuccess) out.minors.push_back(minor);
  }
  return out;
}

struct ShutdownOutcome {
  static ShutdownOutcome thread_failed(const char* /*what*/) { return {}; }
};

struct SnapshotOutcome {
  sys::Result<GpuSnapshot> value;
  static SnapshotOutcome thread_failed(const char* what) {
    return {sys::Error{0, std::string("NVML: cannot start a thread: ") + what}};
  }
};

// One entry as the driver listed it; gpu/compute instance tell MIG slices apart.
struct RawProcess {
  unsigned pid = 0;
  std::optional<std::uint64_t> used;
  unsigned gpu_instance = 0xFFFFFFFFU;
  unsigned compute_instance = 0xFFFFFFFFU;
};

std::optional<std::uint64_t> used_value(unsigned long long used) {
  if (used == nvml::kValueNotAvailable) return std::nullopt;
  return static_cast<std::uint64_t>(used);
}

RawProcess to_raw(const nvml::ProcessInfoV2& e) {
  return RawProcess{e.pid, used_value(e.usedGpuMemory), e.gpuInstanceId, e.computeInstanceId};
}
RawProcess to_raw(const nvml::ProcessInfoV1& e) { return RawProcess{e.pid, used_value(e.usedGpuMemory)}; }

struct Listing {
  nvml::Return rc = nvml::kSuccess;
  std::string problem;  // set when the list was rejected by us, not by NVML
  std::vector<RawProcess> entries;
};

// Query, grow, retry: count 0 first; INSUFFICIENT_SIZE reports the count
// needed, and processes may start between two calls, so each retry allocates
// headroom and the loop is bounded.
template <class Entry>
Listing fetch_processes(nvml::Return (*fn)(nvml::Device, unsigned int*, Entry*), nvml::Device dev) {
  constexpr int kAttempts = 5;
  constexpr unsigned kMaxProcesses = 1U << 16;  // far above any real GPU; guards the arithmetic
  std::vector<Entry> buffer;
  unsigned capacity = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    unsigned count = capacity;
    nvml::Return rc = fn(dev, &count, capacity == 0 ? nullptr : buffer.data());
    if (rc == nvml::kSuccess) {
      Listing out;
      std::size_t n = std::min<std::size_t>(count, capacity);
      out.entries.reserve(n);
      for (std::size_t i = 0; i < n; ++i) out.entries.push_back(to_raw(buffer[i]));
      return out;
    }
    if (rc != nvml::kErrorInsufficientSize) return Listing{rc, {}, {}};
    if (count > kMaxProcesses) {
      return Listing{rc, "implausible process count " + std::to_string(count), {}};
    }
    capacity = count + count / 2 + 4;
    std::size_t entries = (std::size_t{capacity} * nvml::kLargestEntryWritten + sizeof(Entry) - 1) / sizeof(Entry);
    buffer.assign(entries, Entry{});
  }
  return Listing{nvml::kErrorInsufficientSize,
                 "the list kept growing over " + std::to_string(kAttempts) + " attempts", {}};
}

// The 535.43–535.86 stride bug read at a 24-byte stride shows pid 0 or
// 0xFFFFFFFF (the extra 8-byte field); no real process has either.
bool plausible(const std::vector<RawProcess>& entries) {
  return std::none_of(entries.begin(), entries.end(),
                      [](const RawProcess& p) { return p.pid == 0 || p.pid == 0xFFFFFFFFU; });
}

// Tries each version, newest first. NOT_SUPPORTED from every version means the
// device has no such list (empty); any other failure is an Error, because an
// unreadable process list must not look like "nobody holds memory".
template <class T>
std::optional<sys::Result<std::vector<RawProcess>>> list_processes(Calls<T>& calls,
                                                                   const std::vector<ProcessQuery>& queries,
                                                                   nvml::Device dev, unsigned index) {
  const Library& lib = calls.lib();
  std::string failures;
  bool all_unsupported = true;
  for (const auto& q : queries) {
    if (!calls.enter(q.name + "(GPU " + std::to_string(index) + ")")) return std::nullopt;
    Listing listing = q.wide != nullptr ? fetch_processes(q.wide, dev) : fetch_processes(q.narrow, dev);
    std::string failure;
    if (listing.rc == nvml::kSuccess && plausible(listing.entries)) return std::move(listing.entries);
    if (listing.rc == nvml::kSuccess) {
      failure = "rejected entries with pid 0 or 0xFFFFFFFF (wrong entry stride, drivers 535.43-535.86)";
      all_unsupported = false;
    } else {
      failure = listing.problem.empty() ? lib.describe(listing.rc) : listing.problem;
      if (listing.rc != nvml::kErrorNotSupported && listing.rc != nvml::kErrorFunctionNotFound) {
        all_unsupported = false;
      }
    }
    if (!failures.empty()) failures += "; ";
    failures += q.name + ": " + failure;
  }
  if (all_unsupported) return sys::Result<std::vector<RawProcess>>(std::vector<RawProcess>{});
  return sys::Result<std::vector<RawProcess>>(
      sys::Error{0, "NVML: cannot list processes of GPU " + std::to_string(index) + ": " + failures});
}

// Compute and graphics lists name the same process with the same memory, so
// they merge by max; entries of one pid in distinct MIG instances add up. An
// unknown amount stays unknown unless another list knows it.
std::vector<GpuProcess> merge_processes(const std::vector<RawProcess>& compute,
                                        const std::vector<RawProcess>& graphics) {
  std::map<std::tuple<unsigned, unsigned, unsigned>, std::optional<std::uint64_t>> per_instance;
  for (const auto* list : {&compute, &graphics}) {
    for (const auto& p : *list) {
      auto key = std::make_tuple(p.pid, p.gpu_instance, p.compute_instance);
      auto [it, inserted] = per_instance.try_emplace(key, p.used);
      if (!inserted && p.used && (!it->second || *p.used > *it->second)) it->second = p.used;
    }
  }
  std::vector<GpuProcess> out;
  for (const auto& [key, used] : per_instance) {
    unsigned pid = std::get<0>(key);
    if (out.empty() || out.back().pid != pid) {
      out.push_back(GpuProcess{pid, used});
    } else if (out.back().used_memory && used) {
      *out.back().used_memory += *used;
    } else {
      out.back().used_memory = std::nullopt;
    }
  }
  return out;  // sorted by pid (map order)
}

// Copies a NUL-terminated string out of a fixed buffer, never past its end.
std::string from_buffer(const char* buf, std::size_t size) { return std::string(buf, strnlen(buf, size)); }

SnapshotOutcome do_snapshot(Calls<SnapshotOutcome>& calls) {
  Library& lib = calls.lib();
  const SnapshotOutcome gave_up{sys::Error{0, "NVML: abandoned"}};  // nobody reads it
  GpuSnapshot snap;
  if (lib.driver_version != nullptr) {
    char buf[nvml::kDriverVersionBufferSize] = {};
    if (!calls.enter("nvmlSystemGetDriverVersion")) return gave_up;
    if (lib.driver_version(buf, sizeof buf) == nvml::kSuccess) snap.driver_version = from_buffer(buf, sizeof buf);
  }
  unsigned count = 0;
  if (!calls.enter(lib.count_name)) return gave_up;
  nvml::Return rc = lib.get_count(&count);
  if (rc != nvml::kSuccess) return {sys::Error{0, "NVML: " + lib.count_name + " failed: " + lib.describe(rc)}};

  std::string skipped;  // devices whose handle could not be had
  for (unsigned i = 0; i < count; ++i) {
    const std::string gpu = "(GPU " + std::to_string(i) + ")";
    nvml::Device dev = nullptr;
    if (!calls.enter(lib.handle_name + gpu)) return gave_up;
    rc = lib.get_handle(i, &dev);
    if (rc != nvml::kSuccess) {
      // A device we may not open (cgroup-restricted) or one that fell off the
      // bus: skip it, keep the others.
      if (!skipped.empty()) skipped += "; ";
      skipped += "GPU " + std::to_string(i) + ": " + lib.describe(rc);
      continue;
    }
    GpuDevice device;
    device.index = i;
    if (lib.get_uuid != nullptr) {
      char buf[nvml::kUuidBufferSize] = {};
      if (!calls.enter("nvmlDeviceGetUUID" + gpu)) return gave_up;
      if (lib.get_uuid(dev, buf, sizeof buf) == nvml::kSuccess) device.uuid = from_buffer(buf, sizeof buf);
    }
    if (lib.get_name != nullptr) {
      char buf[nvml::kNameBufferSize] = {};
      if (!calls.enter("nvmlDeviceGetName" + gpu)) return gave_up;
      if (lib.get_name(dev, buf, sizeof buf) == nvml::kSuccess) device.name = from_buffer(buf, sizeof buf);
    }
    if (lib.get_minor != nullptr) {
      unsigned minor = 0;
      if (!calls.enter("nvmlDeviceGetMinorNumber" + gpu)) return gave_up;
      if (lib.get_minor(dev, &minor) == nvml::kSuccess) device.minor = minor;
    }
    // v2 first: v1's `used` includes reserved memory (615 MiB on an idle H200).
    if (lib.memory_v2 != nullptr) {
      nvml::MemoryV2 mem{};
      mem.version = nvml::kMemoryV2Version;
      if (!calls.enter("nvmlDeviceGetMemoryInfo_v2" + gpu)) return gave_up;
      if (lib.memory_v2(dev, &mem) == nvml::kSuccess) {
        device.memory = GpuMemory{mem.total, mem.used, mem.reserved};
      }
    }
    if (!device.memory && lib.memory_v1 != nullptr) {
      nvml::Memory mem{};
      if (!calls.enter("nvmlDeviceGetMemoryInfo" + gpu)) return gave_up;
      if (lib.memory_v1(dev, &mem) == nvml::kSuccess) device.memory = GpuMemory{mem.total, mem.used, std::nullopt};
    }
    auto compute = list_processes(calls, lib.compute, dev, i);
    if (!compute) return gave_up;
    if (!compute->ok()) return {compute->error()};
    auto graphics = list_processes(calls, lib.graphics, dev, i);
    if (!graphics) return gave_up;
    if (!graphics->ok()) return {graphics->error()};
    device.processes = merge_processes(compute->value(), graphics->value());
    snap.devices.push_back(std::move(device));
  }
  if (count > 0 && snap.devices.empty()) {
    return {sys::Error{0, "NVML: no GPU could be opened: " + skipped}};
  }
  return {std::move(snap)};
}

struct UtilizationOutcome {
  sys::Result<std::vector<DeviceUtilization>> value;
  static UtilizationOutcome thread_failed(const char* what) {
    return {sys::Error{0, std::string("NVML: cannot start a thread: ") + what}};
  }
};

// One device's samples since `since_us`. NOT_FOUND is the driver's "no process
// was busy" (FACTS.md): every listed process was idle. The buffer is sized like
// the process lists (a NULL buffer may give INVALID_ARGUMENT, so a first guess
// is offered then); NOT_SUPPORTED (MIG, old GPUs) marks the device unsupported.
DeviceUtilization fetch_utilization(const Library& lib, nvml::Device dev, unsigned index,
                                    unsigned long long since_us) {
  DeviceUtilization out;
  out.index = index;
  constexpr int kAttempts = 5;
  constexpr unsigned kFirstGuess = 64;
  constexpr unsigned kMaxSamples = 1U << 16;
  std::vector<nvml::ProcessUtilizationSample> buffer;
  unsigned capacity = 0;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    unsigned count = capacity;
    const nvml::Return rc = lib.process_utilization(dev, capacity == 0 ? nullptr : buffer.data(), &count, since_us);
    if (rc == nvml::kSuccess) {
      const std::size_t n = std::min<std::size_t>(count, capacity);
      for (std::size_t i = 0; i < n; ++i) {
        const auto& e = buffer[i];
        if (e.pid == 0 || e.pid == 0xFFFFFFFFU) continue;  // no real process has either
        out.samples.push_back(UtilizationSample{e.pid, e.timeStamp, e.smUtil, e.memUtil});
      }
      return out;
    }
    if (rc == nvml::kErrorNotFound) return out;
    if (rc == nvml::kErrorNotSupported) {
      out.supported = false;
      out.unsupported_reason = "nvmlDeviceGetProcessUtilization: " + lib.describe(rc) + " (MIG or an older GPU)";
      return out;
    }
    if (rc == nvml::kErrorInvalidArgument && capacity == 0) {
      count = kFirstGuess;
    } else if (rc != nvml::kErrorInsufficientSize || count > kMaxSamples) {
      out.supported = false;
      out.unsupported_reason = "nvmlDeviceGetProcessUtilization: " + lib.describe(rc);
      return out;
    }
    capacity = std::max(count + count / 2 + 4, capacity * 2);
    buffer.assign(capacity, nvml::ProcessUtilizationSample{});
  }
  out.supported = false;
  out.unsupported_reason = "nvmlDeviceGetProcessUtilization: the list kept growing";
  return out;
}

UtilizationOutcome do_utilization(Calls<UtilizationOutcome>& calls, unsigned long long since_us) {
  Library& lib = calls.lib();
  const UtilizationOutcome gave_up{sys::Error{0, "NVML: abandoned"}};  // nobody reads it
  unsigned count = 0;
  if (!calls.enter(lib.count_name)) return gave_up;
  nvml::Return rc = lib.get_count(&count);
  if (rc != nvml::kSuccess) return {sys::Error{0, "NVML: " + lib.count_name + " failed: " + lib.describe(rc)}};
  std::vector<DeviceUtilization> devices;
  for (unsigned i = 0; i < count; ++i) {
    const std::string gpu = "(GPU " + std::to_string(i) + ")";
    nvml::Device dev = nullptr;
    if (!calls.enter(lib.handle_name + gpu)) return gave_up;
    if (lib.get_handle(i, &dev) != nvml::kSuccess) continue;  // as in a snapshot: skip it
    if (lib.process_utilization == nullptr) {
      DeviceUtilization d;
      d.index = i;
      d.supported = false;
      d.unsupported_reason = "the library exports no nvmlDeviceGetProcessUtilization";
      devices.push_back(std::move(d));
      continue;
    }
    if (!calls.enter("nvmlDeviceGetProcessUtilization" + gpu)) return gave_up;
    devices.push_back(fetch_utilization(lib, dev, i, since_us));
  }
  return {std::move(devices)};
}

// ---------------------------------------------------------------------------

class NvmlBackend final : public GpuBackend {
 public:
  NvmlBackend(const sys::HostRoot& root, NvmlOptions options) : root_(root), options_(std::move(options)) {
    auto [lib, why] = load_library(options_.library_names);
    if (!lib) {
      reason_ = std::move(why);
      return;
    }
    lib_ = std::move(lib);
    std::string stuck;
    auto outcome = run_bounded<InitOutcome>(lib_, options_.call_timeout, do_init, stuck);
    if (!outcome) {
      stuck_ = timeout_message(stuck, options_.call_timeout);
      reason_ = stuck_;
      return;
    }
    reason_ = std::move(outcome->reason);
    minors_ = std::move(outcome->minors);
  }

  NvmlBackend(const NvmlBackend&) = delete;
  NvmlBackend& operator=(const NvmlBackend&) = delete;

  ~NvmlBackend() override {
    // Shutdown is an NVML call like any other, so it is bounded too: a tool
    // must be able to exit while a GPU is lost.
    if (lib_ && lib_->initialized.load() && !lib_->abandoned.load() && lib_->shutdown != nullptr) {
      std::string stuck;
      run_bounded<ShutdownOutcome>(
          lib_, options_.call_timeout,
          [](Calls<ShutdownOutcome>& calls) {
            if (calls.enter("nvmlShutdown")) calls.lib().shutdown();
            return ShutdownOutcome{};
          },
          stuck);
    }
  }

  [[nodiscard]] std::string_view name() const override { return "nvml"; }

  sys::Result<GpuSnapshot> snapshot() override {
    // After a timeout NVML most likely holds an internal lock forever; more
    // calls would only strand more threads.
    if (!stuck_.empty()) return sys::Error{0, stuck_};
    if (!lib_ || !lib_->initialized.load() || !reason_.empty()) return GpuSnapshot{};
    std::string stuck;
    auto outcome = run_bounded<SnapshotOutcome>(lib_, options_.call_timeout, do_snapshot, stuck);
    if (!outcome) {
      stuck_ = timeout_message(stuck, options_.call_timeout);
      return sys::Error{0, stuck_};
    }
    return std::move(outcome->value);
  }

  sys::Result<std::vector<DeviceUtilization>> process_utilization(std::uint64_t since_us) override {
    if (!stuck_.empty()) return sys::Error{0, stuck_};
    if (!lib_ || !lib_->initialized.load() || !reason_.empty()) {
      return sys::Error{ENODEV, reason_.empty() ? std::string("NVML: not initialised") : reason_};
    }
    std::string stuck;
    auto outcome = run_bounded<UtilizationOutcome>(
        lib_, options_.call_timeout,
        [since_us](Calls<UtilizationOutcome>& calls) { return do_utilization(calls, since_us); }, stuck);
    if (!outcome) {
      stuck_ = timeout_message(stuck, options_.call_timeout);
      return sys::Error{0, stuck_};
    }
    return std::move(outcome->value);
  }

  [[nodiscard]] proc::DeviceMatcher device_matcher() const override {
    // The nodes found under the host root, plus what NVML told us in case
    // /dev is not visible there (a container without the host's /dev): the
    // driver's fixed numbers are known (FACTS.md), nvidia-uvm's major is not.
    constexpr unsigned kNvidiaMajor = 195;
    constexpr unsigned kCtlMinor = 255;
    proc::DeviceMatcher m = real_device_matcher(root_);
    auto add = [&m](const std::string& name, std::optional<dev_t> rdev) {
      bool known = std::any_of(m.nodes.begin(), m.nodes.end(), [&name](const auto& n) { return n.name == name; });
      if (!known) m.nodes.push_back(proc::DeviceNode{name, "/dev/" + name, rdev, std::nullopt});
    };
    for (unsigned minor : minors_) add("nvidia" + std::to_string(minor), makedev(kNvidiaMajor, minor));
    add("nvidiactl", makedev(kNvidiaMajor, kCtlMinor));
    add("nvidia-uvm", std::nullopt);
    if (std::find(m.majors.begin(), m.majors.end(), kNvidiaMajor) == m.majors.end()) {
      m.majors.insert(m.majors.begin(), kNvidiaMajor);
    }
    return m;
  }

  [[nodiscard]] std::string unavailable_reason() const override { return reason_; }
  [[nodiscard]] bool hung() const override { return !stuck_.empty(); }

 private:
  sys::HostRoot root_;
  NvmlOptions options_;
  std::shared_ptr<Library> lib_;  // null when no library loaded
  std::string reason_;            // why there are no devices; empty when there are
  std::string stuck_;             // set once a call timed out
  std::vector<unsigned> minors_;
};

}  // namespace

std::unique_ptr<GpuBackend> make_nvml_backend(const sys::HostRoot& root, NvmlOptions options) {
  return std::make_unique<NvmlBackend>(root, std::move(options));
}

}  // namespace gpureap::gpu
