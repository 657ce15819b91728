// A fake libnvidia-ml for the NVML backend's tests. One source, built as
// several .so variants that export fewer symbols (compile definitions
// FAKE_NVML_NO_*), so the backend's fallbacks meet real missing symbols.
// Behaviour is picked by FAKE_NVML_SCENARIO (comma-separated flags), read at
// nvmlInit; state is file-static because this is a test double, and
// fake_nvml_reset() clears it between tests that share one process.
//
// Default world: driver "580.159.04", two GPUs (minors 4 and 5).
//   GPU 0: compute {100: 1 GiB, 200: not available}, graphics {100: 1 GiB, 300: 512 MiB};
//          memory total 80 GiB, reserved 615 MiB, used (v2) 2 GiB.
//   GPU 1: no processes.
// Flags:
//   init_fail         nvmlInit* returns 9 (driver not loaded)
//   no_devices        the count is 0
//   mem_v2_unsupported nvmlDeviceGetMemoryInfo_v2 returns 3
//   grow              GPU 0 compute: 2 processes at the first call, 3 after
//   grow_past_headroom GPU 0 compute: each of the first calls with a buffer finds one
//                     more process than the buffer holds
//   grow_forever      GPU 0 compute always needs more room than given
//   bad_stride_v3     the _v3 calls write 32-byte entries (drivers 535.43-535.86)
//   fill_buffer       GPU 0 compute: as many processes as the buffer given holds
//   zero_pid          every process call lists a process with pid 0
//   compute_denied    every compute call returns 4 (no permission)
//   graphics_unsupported every graphics call returns 3
//   handle_lost       GPU 1's handle returns 15 (GPU is lost)
//   hang              compute calls block until fake_nvml_release()
//   hang_init         nvmlInit* blocks until fake_nvml_release()
//   idle              GPU 0 lists no process; both GPUs as an idle H200: v2 used 0,
//                     reserved 615 MiB; v1 used 615 MiB (reserved included)
//   ghost_3g          GPU 0 lists no process yet holds 3 GiB: v2 used 3 GiB,
//                     v1 used 3 GiB + 615 MiB; GPU 1 idle
// Utilization (nvmlDeviceGetProcessUtilization): on GPU 0 pid 100 runs at 95 % SM
// (two samples, 90 and 100, at timestamps 1000 and 2000 µs; only those after
// lastSeenTimeStamp are returned), every other process is idle (absent); GPU 1
// answers NOT_FOUND (nobody busy).
//   util_unsupported  every utilization call returns 3 (MIG)
//   util_null_invalid a NULL buffer gives 2 (INVALID_ARGUMENT), as some drivers do
//   hang              also blocks utilization calls
//   hang_later        compute calls answer 4 times (two snapshots), then block
//                     like hang: a driver that hangs while the exporter runs
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace {

struct ProcessInfoV1 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
};
struct ProcessInfoV2 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
};
// What drivers 535.43-535.86 wrote for the _v3 calls.
struct ProcessInfo32 {
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId;
  unsigned int computeInstanceId;
  unsigned long long usedGpuCcProtectedMemory;
};
static_assert(sizeof(ProcessInfo32) == 32);
struct Memory {
  unsigned long long total, free, used;
};
struct MemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
struct UtilizationSample {
  unsigned int pid;
  unsigned long long timeStamp;
  unsigned int smUtil, memUtil, encUtil, decUtil;
};
static_assert(sizeof(UtilizationSample) == 32);

constexpr unsigned long long kGiB = 1ULL << 30;
constexpr unsigned long long kMiB = 1ULL << 20;
constexpr unsigned long long kNotAvailable = ~0ULL;

struct Proc {
  unsigned pid;
  unsigned long long used;
};

struct State {
  std::mutex mutex;
  std::condition_variable release_cv;
  bool released = false;
  int blocked = 0;
  std::string scenario;
  std::map<std::string, int> calls;
  int compute_calls = 0;  // GPU 0 compute calls with a buffer, for the growth flags
  int all_compute_calls = 0;  // every compute call, for hang_later
};

State& state() {
  static State s;
  return s;
}

bool has(const char* flag) {
  std::lock_guard lock(state().mutex);
  const std::string& s = state().scenario;
  std::string::size_type pos = 0;
  const std::string f(flag);
  while ((pos = s.find(f, pos)) != std::string::npos) {
    bool start = pos == 0 || s[pos - 1] == ',';
    bool end = pos + f.size() == s.size() || s[pos + f.size()] == ',';
    if (start && end) return true;
    pos += f.size();
  }
  return false;
}

void count_call(const char* name) {
  std::lock_guard lock(state().mutex);
  ++state().calls[name];
}

void block_until_released() {
  std::unique_lock lock(state().mutex);
  ++state().blocked;
  state().release_cv.wait(lock, [] { return state().released; });
  --state().blocked;
}

// Devices are tagged pointers: index + 1, never dereferenced.
using Device = void*;
Device device_of(unsigned i) { return reinterpret_cast<Device>(static_cast<std::uintptr_t>(i) + 1); }
unsigned index_of(Device d) { return static_cast<unsigned>(reinterpret_cast<std::uintptr_t>(d) - 1); }

int do_init(const char* name) {
  count_call(name);
  {
    std::lock_guard lock(state().mutex);
    const char* env = std::getenv("FAKE_NVML_SCENARIO");
    state().scenario = env != nullptr ? env : "";
    state().compute_calls = 0;
    state().all_compute_calls = 0;
  }
  if (has("hang_init")) block_until_released();
  if (has("init_fail")) return 9;
  return 0;
}

unsigned device_count() { return has("no_devices") ? 0U : 2U; }

// GPU 0 lists nothing in these worlds.
bool gpu0_empty() {
  return has("idle") || has("ghost_3g");
}

// A GPU's used memory by v2 accounting (reserved excluded); in the idle and
// ghost worlds GPU 1 is idle.
unsigned long long used_v2(unsigned dev) {
  if (has("idle")) return 0;
  if (has("ghost_3g")) return dev == 0 ? 3 * kGiB : 0;
  return 2 * kGiB;
}

std::vector<Proc> compute_list(unsigned dev, bool with_buffer, unsigned capacity) {
  if (dev != 0 || gpu0_empty()) return {};
  std::vector<Proc> procs{{100, kGiB}, {200, kNotAvailable}};
  if (has("zero_pid")) procs.push_back({0, kMiB});
  int calls = 0;
  if (with_buffer) {
    std::lock_guard lock(state().mutex);
    calls = ++state().compute_calls;
  }
  if (has("grow") && with_buffer) procs.push_back({201, 3 * kMiB});
  // A process starts between every two calls, beyond whatever room was given.
  bool outgrow = has("grow_forever") || (has("grow_past_headroom") && calls <= 2);
  if (has("fill_buffer") && with_buffer) {
    for (unsigned pid = 2000; procs.size() < capacity; ++pid) procs.push_back({pid, kMiB});
  }
  if (outgrow && with_buffer) {
    for (unsigned pid = 1000; procs.size() <= capacity; ++pid) procs.push_back({pid, kMiB});
  }
  return procs;
}

std::vector<Proc> graphics_list(unsigned dev) {
  if (dev != 0 || gpu0_empty()) return {};
  std::vector<Proc> procs{{100, kGiB}, {300, 512 * kMiB}};
  if (has("zero_pid")) procs.push_back({0, kMiB});
  return procs;
}

enum class Layout { V1, V2, Stride32 };

// NVML's contract: too small a count → 7 and the needed count; else fill.
int fill(const std::vector<Proc>& procs, unsigned* count, void* infos, Layout layout) {
  if (count == nullptr) return 2;
  const auto n = static_cast<unsigned>(procs.size());
  if (*count < n) {
    *count = n;
    return 7;
  }
  if (n > 0 && infos == nullptr) return 2;
  for (unsigned i = 0; i < n; ++i) {
    switch (layout) {
      case Layout::V1:
        static_cast<ProcessInfoV1*>(infos)[i] = ProcessInfoV1{procs[i].pid, procs[i].used};
        break;
      case Layout::V2:
        static_cast<ProcessInfoV2*>(infos)[i] = ProcessInfoV2{procs[i].pid, procs[i].used, 0xFFFFFFFFU, 0xFFFFFFFFU};
        break;
      case Layout::Stride32:
        // The caller's 24-byte entries are overrun at a 32-byte stride; the
        // trailing field is 0 like a non-confidential-computing GPU's.
        static_cast<ProcessInfo32*>(infos)[i] =
            ProcessInfo32{procs[i].pid, procs[i].used, 0xFFFFFFFFU, 0xFFFFFFFFU, 0};
        break;
    }
  }
  *count = n;
  return 0;
}

int compute(const char* name, Device dev, unsigned* count, void* infos, Layout layout) {
  count_call(name);
  if (has("hang")) block_until_released();
  if (has("hang_later")) {
    bool later = false;
    {
      std::lock_guard lock(state().mutex);
      later = ++state().all_compute_calls > 4;
    }
    if (later) block_until_released();
  }
  if (has("compute_denied")) return 4;
  bool with_buffer = count != nullptr && *count > 0;
  return fill(compute_list(index_of(dev), with_buffer, with_buffer ? *count : 0), count, infos, layout);
}

int graphics(const char* name, Device dev, unsigned* count, void* infos, Layout layout) {
  count_call(name);
  if (has("graphics_unsupported")) return 3;
  return fill(graphics_list(index_of(dev)), count, infos, layout);
}

int copy_string(const std::string& s, char* buf, unsigned len) {
  if (buf == nullptr || len <= s.size()) return 7;
  std::memcpy(buf, s.c_str(), s.size() + 1);
  return 0;
}

int get_count(const char* name, unsigned* count) {
  count_call(name);
  *count = device_count();
  return 0;
}

int get_handle(const char* name, unsigned index, Device* dev) {
  count_call(name);
  if (index >= device_count()) return 2;
  if (index == 1 && has("handle_lost")) return 15;
  *dev = device_of(index);
  return 0;
}

}  // namespace

extern "C" {

// ---- test controls (not NVML) ----
__attribute__((visibility("default"))) int fake_nvml_calls(const char* name) {
  std::lock_guard lock(state().mutex);
  auto it = state().calls.find(name);
  return it == state().calls.end() ? 0 : it->second;
}
// Starts a test afresh when several run in one process (counters, release).
__attribute__((visibility("default"))) void fake_nvml_reset() {
  std::lock_guard lock(state().mutex);
  state().calls.clear();
  state().released = false;
}
__attribute__((visibility("default"))) void fake_nvml_release() {
  std::lock_guard lock(state().mutex);
  state().released = true;
  state().release_cv.notify_all();
}
__attribute__((visibility("default"))) int fake_nvml_blocked() {
  std::lock_guard lock(state().mutex);
  return state().blocked;
}

// ---- NVML ----
#ifndef FAKE_NVML_NO_VERSIONED_INIT
int nvmlInit_v2() { return do_init("nvmlInit_v2"); }
int nvmlDeviceGetCount_v2(unsigned* count) { return get_count("nvmlDeviceGetCount_v2", count); }
int nvmlDeviceGetHandleByIndex_v2(unsigned index, Device* dev) {
  return get_handle("nvmlDeviceGetHandleByIndex_v2", index, dev);
}
#endif
int nvmlInit() { return do_init("nvmlInit"); }
int nvmlDeviceGetCount(unsigned* count) { return get_count("nvmlDeviceGetCount", count); }
int nvmlDeviceGetHandleByIndex(unsigned index, Device* dev) {
  return get_handle("nvmlDeviceGetHandleByIndex", index, dev);
}

int nvmlShutdown() {
  count_call("nvmlShutdown");
  return 0;
}

#ifndef FAKE_NVML_NO_ERROR_STRING
const char* nvmlErrorString(int rc) {
  switch (rc) {
    case 4: return "Fake: No permission";
    case 9: return "Fake: Driver Not Loaded";
    case 15: return "Fake: GPU is lost";
    default: return "Fake: some error";
  }
}
#endif

int nvmlSystemGetDriverVersion(char* buf, unsigned len) {
  count_call("nvmlSystemGetDriverVersion");
  return copy_string("580.159.04", buf, len);
}

int nvmlDeviceGetUUID(Device dev, char* buf, unsigned len) {
  count_call("nvmlDeviceGetUUID");
  return copy_string("GPU-fake-" + std::to_string(index_of(dev)), buf, len);
}

int nvmlDeviceGetName(Device, char* buf, unsigned len) {
  count_call("nvmlDeviceGetName");
  return copy_string("Fake H200", buf, len);
}

#ifndef FAKE_NVML_NO_MINOR
int nvmlDeviceGetMinorNumber(Device dev, unsigned* minor) {
  count_call("nvmlDeviceGetMinorNumber");
  *minor = index_of(dev) + 4;
  return 0;
}
#endif

#ifndef FAKE_NVML_NO_MEMORY_V2
int nvmlDeviceGetMemoryInfo_v2(Device dev, MemoryV2* mem) {
  count_call("nvmlDeviceGetMemoryInfo_v2");
  if (has("mem_v2_unsupported")) return 3;
  if (mem->version != 0x02000028U) return 2;  // NVML_ERROR_INVALID_ARGUMENT for a wrong version
  mem->total = 80 * kGiB;
  mem->reserved = 615 * kMiB;
  mem->used = used_v2(index_of(dev));
  mem->free = mem->total - mem->reserved - mem->used;
  return 0;
}
#endif

int nvmlDeviceGetMemoryInfo(Device dev, Memory* mem) {
  count_call("nvmlDeviceGetMemoryInfo");
  mem->total = 80 * kGiB;
  mem->used = used_v2(index_of(dev)) + 615 * kMiB;  // v1 counts reserved memory as used
  mem->free = mem->total - mem->used;
  return 0;
}

#ifndef FAKE_NVML_NO_UTILIZATION
int nvmlDeviceGetProcessUtilization(Device dev, UtilizationSample* samples, unsigned* count,
                                    unsigned long long last_seen) {
  count_call("nvmlDeviceGetProcessUtilization");
  if (has("hang")) block_until_released();
  if (count == nullptr) return 2;
  if (has("util_unsupported")) return 3;
  std::vector<UtilizationSample> busy;
  if (index_of(dev) == 0 && !gpu0_empty()) {
    for (const UtilizationSample& s : {UtilizationSample{100, 1000, 90, 10, 0, 0},
                                       UtilizationSample{100, 2000, 100, 12, 0, 0}}) {
      if (s.timeStamp > last_seen) busy.push_back(s);
    }
  }
  if (busy.empty()) return 6;  // NOT_FOUND: no process was busy since last_seen
  if (samples == nullptr && has("util_null_invalid")) return 2;
  if (samples == nullptr || *count < busy.size()) {
    *count = static_cast<unsigned>(busy.size());
    return 7;
  }
  for (std::size_t i = 0; i < busy.size(); ++i) samples[i] = busy[i];
  *count = static_cast<unsigned>(busy.size());
  return 0;
}
#endif

#ifndef FAKE_NVML_NO_V3
int nvmlDeviceGetComputeRunningProcesses_v3(Device dev, unsigned* count, void* infos) {
  return compute("nvmlDeviceGetComputeRunningProcesses_v3", dev, count, infos,
                 has("bad_stride_v3") ? Layout::Stride32 : Layout::V2);
}
int nvmlDeviceGetGraphicsRunningProcesses_v3(Device dev, unsigned* count, void* infos) {
  return graphics("nvmlDeviceGetGraphicsRunningProcesses_v3", dev, count, infos,
                  has("bad_stride_v3") ? Layout::Stride32 : Layout::V2);
}
#endif
#ifndef FAKE_NVML_NO_V2
int nvmlDeviceGetComputeRunningProcesses_v2(Device dev, unsigned* count, void* infos) {
  return compute("nvmlDeviceGetComputeRunningProcesses_v2", dev, count, infos, Layout::V2);
}
int nvmlDeviceGetGraphicsRunningProcesses_v2(Device dev, unsigned* count, void* infos) {
  return graphics("nvmlDeviceGetGraphicsRunningProcesses_v2", dev, count, infos, Layout::V2);
}
#endif
#ifndef FAKE_NVML_NO_V1
int nvmlDeviceGetComputeRunningProcesses(Device dev, unsigned* count, void* infos) {
  return compute("nvmlDeviceGetComputeRunningProcesses", dev, count, infos, Layout::V1);
}
int nvmlDeviceGetGraphicsRunningProcesses(Device dev, unsigned* count, void* infos) {
  return graphics("nvmlDeviceGetGraphicsRunningProcesses", dev, count, infos, Layout::V1);
}
#endif

}  // extern "C"
