// The NVML backend against fake_nvml.cpp: each version fallback, the growth
// loop, the stride check, missing optional symbols, missing library/driver,
// and calls that never return. Scenarios are documented in fake_nvml.cpp.
#include "gpu/nvml_backend.hpp"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"

namespace gpureap::gpu {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kGiB = 1ULL << 30;
constexpr std::uint64_t kMiB = 1ULL << 20;

const char* const kFull = FAKE_NVML_FULL;
const char* const kV2Only = FAKE_NVML_V2ONLY;
const char* const kV3Only = FAKE_NVML_V3ONLY;
const char* const kLegacy = FAKE_NVML_LEGACY;

// Sets the scenario and opens the fake too, to read its call counters. The
// backend's dlopen of the same path gets the same loaded object.
class Fake {
 public:
  Fake(const char* path, const char* scenario) {
    ::setenv("FAKE_NVML_SCENARIO", scenario, 1);
    handle_ = ::dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (handle_ == nullptr) {
      ADD_FAILURE() << "cannot open the fake: " << ::dlerror();
      return;
    }
    calls_ = reinterpret_cast<int (*)(const char*)>(::dlsym(handle_, "fake_nvml_calls"));
    release_ = reinterpret_cast<void (*)()>(::dlsym(handle_, "fake_nvml_release"));
    blocked_ = reinterpret_cast<int (*)()>(::dlsym(handle_, "fake_nvml_blocked"));
    reinterpret_cast<void (*)()>(::dlsym(handle_, "fake_nvml_reset"))();
  }
  Fake(const Fake&) = delete;
  Fake& operator=(const Fake&) = delete;
  // Lets a call the backend abandoned return, so its detached worker ends
  // before the test process does (no thread is left blocked at exit).
  ~Fake() {
    if (handle_ == nullptr) return;
    release_();
    for (int i = 0; i < 500 && blocked_() > 0; ++i) std::this_thread::sleep_for(10ms);
    std::this_thread::sleep_for(50ms);  // the worker's last steps after the call returns
    ::dlclose(handle_);
  }
  int calls(const char* name) const { return calls_ != nullptr ? calls_(name) : -1; }

 private:
  void* handle_ = nullptr;
  int (*calls_)(const char*) = nullptr;
  void (*release_)() = nullptr;
  int (*blocked_)() = nullptr;
};

sys::HostRoot root() {
  auto r = sys::HostRoot::open("/");
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

NvmlOptions options(const char* lib, std::chrono::milliseconds timeout = 20s) {
  NvmlOptions o;
  o.library_names = {lib};
  o.call_timeout = timeout;
  return o;
}

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

const std::vector<GpuProcess> kDefaultProcesses{{100, kGiB}, {200, std::nullopt}, {300, 512 * kMiB}};

TEST(NvmlBackend, CurrentDriverUsesV3ListsAndMemoryV2) {
  Fake fake(kFull, "");
  auto backend = make_nvml_backend(root(), options(kFull));
  EXPECT_EQ(backend->name(), "nvml");
  EXPECT_EQ(backend->unavailable_reason(), "");
  auto snap = backend->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(snap->driver_version, "580.159.04");
  ASSERT_EQ(snap->devices.size(), 2U);
  const GpuDevice& d0 = snap->devices[0];
  EXPECT_EQ(d0.index, 0U);
  EXPECT_EQ(d0.uuid, "GPU-fake-0");
  EXPECT_EQ(d0.name, "Fake H200");
  EXPECT_EQ(d0.minor, 4U);
  ASSERT_TRUE(d0.memory.has_value());
  EXPECT_EQ(*d0.memory, (GpuMemory{80 * kGiB, 2 * kGiB, 615 * kMiB}));
  // Compute and graphics merged by pid; 200's memory is "not available", not 0.
  EXPECT_EQ(d0.processes, kDefaultProcesses);
  const GpuDevice& d1 = snap->devices[1];
  EXPECT_EQ(d1.uuid, "GPU-fake-1");
  EXPECT_EQ(d1.minor, 5U);
  EXPECT_TRUE(d1.processes.empty());

  EXPECT_EQ(fake.calls("nvmlInit_v2"), 1);
  EXPECT_EQ(fake.calls("nvmlInit"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetCount_v2"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetGraphicsRunningProcesses_v3"), 0);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
  EXPECT_EQ(fake.calls("nvmlDeviceGetMemoryInfo"), 0);
}

TEST(NvmlBackend, InitOnceAndShutdownOnDestruction) {
  Fake fake(kFull, "");
  auto backend = make_nvml_backend(root(), options(kFull));
  ASSERT_TRUE(backend->snapshot().ok());
  ASSERT_TRUE(backend->snapshot().ok());
  EXPECT_EQ(fake.calls("nvmlInit_v2"), 1);
  EXPECT_EQ(fake.calls("nvmlShutdown"), 0);
  backend.reset();
  EXPECT_EQ(fake.calls("nvmlShutdown"), 1);
}

TEST(NvmlBackend, MemoryV2UnsupportedFallsBackToV1WithReservedUnknown) {
  Fake fake(kFull, "mem_v2_unsupported");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  ASSERT_TRUE(snap->devices.at(0).memory.has_value());
  EXPECT_EQ(*snap->devices[0].memory, (GpuMemory{80 * kGiB, 2 * kGiB + 615 * kMiB, std::nullopt}));
  EXPECT_GT(fake.calls("nvmlDeviceGetMemoryInfo"), 0);
}

TEST(NvmlBackend, WithoutV3UsesV2Lists) {
  Fake fake(kV2Only, "");
  auto snap = make_nvml_backend(root(), options(kV2Only))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(snap->devices.at(0).processes, kDefaultProcesses);
  EXPECT_GT(fake.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetGraphicsRunningProcesses_v2"), 0);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses"), 0);
}

TEST(NvmlBackend, OldDriverUsesPlainSymbolsV1EntriesAndMemoryV1) {
  Fake fake(kLegacy, "");
  auto backend = make_nvml_backend(root(), options(kLegacy));
  EXPECT_EQ(backend->unavailable_reason(), "");
  auto snap = backend->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  ASSERT_EQ(snap->devices.size(), 2U);
  const GpuDevice& d0 = snap->devices[0];
  EXPECT_EQ(d0.minor, std::nullopt);  // no nvmlDeviceGetMinorNumber: unknown, not 0
  ASSERT_TRUE(d0.memory.has_value());
  EXPECT_EQ(*d0.memory, (GpuMemory{80 * kGiB, 2 * kGiB + 615 * kMiB, std::nullopt}));
  EXPECT_EQ(d0.processes, kDefaultProcesses);
  EXPECT_EQ(fake.calls("nvmlInit"), 1);
  EXPECT_GT(fake.calls("nvmlDeviceGetCount"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetHandleByIndex"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetComputeRunningProcesses"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetGraphicsRunningProcesses"), 0);
}

TEST(NvmlBackend, GrowthLoopRetriesWhenAProcessAppears) {
  Fake fake(kFull, "grow");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  const std::vector<GpuProcess> expected{{100, kGiB}, {200, std::nullopt}, {201, 3 * kMiB}, {300, 512 * kMiB}};
  EXPECT_EQ(snap->devices.at(0).processes, expected);
}

TEST(NvmlBackend, GrowthPastHeadroomRetriesAgain) {
  Fake fake(kFull, "grow_past_headroom");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(snap->devices.at(0).processes, kDefaultProcesses);
  // GPU 0: count query, two buffers outgrown, one that fits; GPU 1: count query.
  EXPECT_GE(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 5);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
}

TEST(NvmlBackend, EndlessGrowthIsBoundedAndAnError) {
  Fake fake(kFull, "grow_forever");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_FALSE(snap.ok());
  EXPECT_TRUE(contains(snap.error().message, "kept growing")) << snap.error().message;
  EXPECT_TRUE(contains(snap.error().message, "GPU 0")) << snap.error().message;
}

TEST(NvmlBackend, V3WrittenAt32ByteStrideFallsBackToV2) {
  Fake fake(kFull, "bad_stride_v3");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(snap->devices.at(0).processes, kDefaultProcesses);
  EXPECT_GT(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 0);
  EXPECT_GT(fake.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
}

// A buggy _v3 filling the whole buffer writes 32 bytes per entry: the buffer
// has room for that (ASan would report the overrun otherwise).
TEST(NvmlBackend, V3StrideBugCannotOverrunAFullBuffer) {
  Fake fake(kFull, "bad_stride_v3,fill_buffer");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  const auto& procs = snap->devices.at(0).processes;
  EXPECT_GT(procs.size(), 3U);
  EXPECT_EQ(procs.front(), (GpuProcess{100, kGiB}));
  EXPECT_GT(fake.calls("nvmlDeviceGetComputeRunningProcesses_v2"), 0);
}

TEST(NvmlBackend, BadStrideWithNothingOlderIsAnError) {
  Fake fake(kV3Only, "bad_stride_v3");
  auto snap = make_nvml_backend(root(), options(kV3Only))->snapshot();
  ASSERT_FALSE(snap.ok());
  EXPECT_TRUE(contains(snap.error().message, "stride")) << snap.error().message;
}

TEST(NvmlBackend, OnlyV3IsEnoughWhenItsEntriesAreSound) {
  Fake fake(kV3Only, "");
  auto snap = make_nvml_backend(root(), options(kV3Only))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(snap->devices.at(0).processes, kDefaultProcesses);
}

TEST(NvmlBackend, PidZeroInEveryVersionIsAnError) {
  Fake fake(kFull, "zero_pid");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_FALSE(snap.ok());
  EXPECT_TRUE(contains(snap.error().message, "_v3")) << snap.error().message;
  EXPECT_TRUE(contains(snap.error().message, "_v2")) << snap.error().message;
}

TEST(NvmlBackend, DeniedProcessListIsAnErrorNamedByNvml) {
  Fake fake(kFull, "compute_denied");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_FALSE(snap.ok());
  EXPECT_TRUE(contains(snap.error().message, "Fake: No permission (NVML code 4)")) << snap.error().message;
}

TEST(NvmlBackend, WithoutErrorStringCodesAreNamedByOwnTable) {
  Fake fake(kLegacy, "compute_denied");
  auto snap = make_nvml_backend(root(), options(kLegacy))->snapshot();
  ASSERT_FALSE(snap.ok());
  EXPECT_TRUE(contains(snap.error().message, "Insufficient Permissions (NVML code 4)")) << snap.error().message;
}

TEST(NvmlBackend, GraphicsNotSupportedIsAnEmptyGraphicsList) {
  Fake fake(kFull, "graphics_unsupported");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  const std::vector<GpuProcess> compute_only{{100, kGiB}, {200, std::nullopt}};
  EXPECT_EQ(snap->devices.at(0).processes, compute_only);
}

TEST(NvmlBackend, LostDeviceIsSkippedOthersKept) {
  Fake fake(kFull, "handle_lost");
  auto snap = make_nvml_backend(root(), options(kFull))->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  ASSERT_EQ(snap->devices.size(), 1U);
  EXPECT_EQ(snap->devices[0].index, 0U);
}

TEST(NvmlBackend, LibraryNotFoundHasNoDevicesAndSaysWhy) {
  auto backend = make_nvml_backend(root(), options("/nonexistent/libnvidia-ml.so.1"));
  const std::string reason = backend->unavailable_reason();
  EXPECT_TRUE(contains(reason, "NVML: /nonexistent/libnvidia-ml.so.1 not found (")) << reason;
  EXPECT_TRUE(contains(reason, "No such file")) << reason;
  auto snap = backend->snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(*snap, GpuSnapshot{});
}

// A library that loads but is no NVML (a stub, another library) is skipped.
TEST(NvmlBackend, LibraryWithoutNvmlSymbolsIsSkipped) {
  auto alone = make_nvml_backend(root(), options("libm.so.6"));
  EXPECT_TRUE(contains(alone->unavailable_reason(), "libm.so.6 exports no nvmlInit")) << alone->unavailable_reason();
  EXPECT_TRUE(alone->snapshot().ok());

  Fake fake(kFull, "");
  NvmlOptions o = options(kFull);
  o.library_names = {"libm.so.6", kFull};
  auto backend = make_nvml_backend(root(), o);
  EXPECT_EQ(backend->unavailable_reason(), "");
  auto snap = backend->snapshot();
  ASSERT_TRUE(snap.ok()) << snap.error().message;
  EXPECT_EQ(snap->devices.size(), 2U);
}

TEST(NvmlBackend, DriverNotLoadedHasNoDevicesAndSaysWhy) {
  Fake fake(kFull, "init_fail");
  auto backend = make_nvml_backend(root(), options(kFull));
  const std::string reason = backend->unavailable_reason();
  EXPECT_TRUE(contains(reason, "nvmlInit_v2 failed: Fake: Driver Not Loaded (NVML code 9)")) << reason;
  auto snap = backend->snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_EQ(*snap, GpuSnapshot{});
  backend.reset();
  EXPECT_EQ(fake.calls("nvmlShutdown"), 0);  // init never succeeded
}

TEST(NvmlBackend, NoDevicesSaysSo) {
  Fake fake(kFull, "no_devices");
  auto backend = make_nvml_backend(root(), options(kFull));
  EXPECT_TRUE(contains(backend->unavailable_reason(), "no GPUs")) << backend->unavailable_reason();
  auto snap = backend->snapshot();
  ASSERT_TRUE(snap.ok());
  EXPECT_TRUE(snap->devices.empty());
}

TEST(NvmlBackend, HangingCallTimesOutWithAnError) {
  Fake fake(kFull, "hang");
  auto backend = make_nvml_backend(root(), options(kFull, 200ms));
  ASSERT_EQ(backend->unavailable_reason(), "");
  const auto start = std::chrono::steady_clock::now();
  auto snap = backend->snapshot();
  const auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(snap.ok());
  const std::string& message = snap.error().message;
  EXPECT_TRUE(contains(message, "nvmlDeviceGetComputeRunningProcesses_v3(GPU 0)")) << message;
  EXPECT_TRUE(contains(message, "may be lost")) << message;
  EXPECT_LT(took, 60s);  // it returned; the bound is loose on purpose
  // NVML is not called again: the next snapshot fails at once, no second stuck thread.
  auto again = backend->snapshot();
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().message, message);
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 1);
  backend.reset();  // must not block on the stuck call, nor shut NVML down under it
  EXPECT_EQ(fake.calls("nvmlShutdown"), 0);
}

TEST(NvmlBackend, HangingInitTimesOut) {
  Fake fake(kFull, "hang_init");
  auto backend = make_nvml_backend(root(), options(kFull, 200ms));
  const std::string reason = backend->unavailable_reason();
  EXPECT_TRUE(contains(reason, "nvmlInit_v2 did not return")) << reason;
  auto snap = backend->snapshot();  // unknown state, not "no GPUs"
  ASSERT_FALSE(snap.ok());
  EXPECT_EQ(snap.error().message, reason);
}

TEST(NvmlUtilization, BusyProcessesAreListedAndAnIdleDeviceAnswersEmpty) {
  Fake fake(kFull, "");
  auto backend = make_nvml_backend(root(), options(kFull));
  auto util = backend->process_utilization(0);
  ASSERT_TRUE(util.ok()) << util.error().message;
  ASSERT_EQ(util->size(), 2U);
  const DeviceUtilization& d0 = (*util)[0];
  EXPECT_TRUE(d0.supported);
  EXPECT_EQ(d0.samples, (std::vector<UtilizationSample>{{100, 1000, 90, 10}, {100, 2000, 100, 12}}));
  // NOT_FOUND is "nobody was busy": supported, no samples (every process idle).
  EXPECT_TRUE((*util)[1].supported);
  EXPECT_TRUE((*util)[1].samples.empty());
  // Only samples after the last timestamp seen.
  auto since = backend->process_utilization(1000);
  ASSERT_TRUE(since.ok());
  EXPECT_EQ((*since)[0].samples, (std::vector<UtilizationSample>{{100, 2000, 100, 12}}));
}

TEST(NvmlUtilization, ANullBufferRefusedAsInvalidIsRetriedWithOne) {
  Fake fake(kFull, "util_null_invalid");
  auto backend = make_nvml_backend(root(), options(kFull));
  auto util = backend->process_utilization(0);
  ASSERT_TRUE(util.ok()) << util.error().message;
  EXPECT_EQ((*util)[0].samples.size(), 2U);
}

TEST(NvmlUtilization, MigOrAnOldLibraryMarksDevicesUnsupported) {
  {
    Fake fake(kFull, "util_unsupported");
    auto backend = make_nvml_backend(root(), options(kFull));
    auto util = backend->process_utilization(0);
    ASSERT_TRUE(util.ok());
    ASSERT_EQ(util->size(), 2U);
    EXPECT_FALSE((*util)[0].supported);
    EXPECT_TRUE(contains((*util)[0].unsupported_reason, "MIG")) << (*util)[0].unsupported_reason;
  }
  {
    Fake fake(kLegacy, "");
    auto backend = make_nvml_backend(root(), options(kLegacy));
    auto util = backend->process_utilization(0);
    ASSERT_TRUE(util.ok());
    ASSERT_EQ(util->size(), 2U);
    EXPECT_FALSE((*util)[1].supported);
    EXPECT_TRUE(contains((*util)[1].unsupported_reason, "exports no")) << (*util)[1].unsupported_reason;
  }
}

TEST(NvmlUtilization, AHungCallTimesOutAndNvmlIsNotCalledAgain) {
  Fake fake(kFull, "hang");
  auto backend = make_nvml_backend(root(), options(kFull, 200ms));
  auto util = backend->process_utilization(0);
  ASSERT_FALSE(util.ok());
  EXPECT_TRUE(contains(util.error().message, "nvmlDeviceGetProcessUtilization(GPU 0)")) << util.error().message;
  EXPECT_FALSE(backend->snapshot().ok());
  EXPECT_EQ(fake.calls("nvmlDeviceGetComputeRunningProcesses_v3"), 0);
}

// A host root with one node on disk and /proc/devices, and NVML's minors 4 and 5.
TEST(NvmlBackend, DeviceMatcherJoinsHostNodesAndNvmlMinors) {
  char dir[] = "/tmp/gpu_nvml_root.XXXXXX";
  ASSERT_NE(::mkdtemp(dir), nullptr);
  const std::string base = dir;
  ASSERT_EQ(::mkdir((base + "/dev").c_str(), 0755), 0);
  ASSERT_EQ(::mkdir((base + "/proc").c_str(), 0755), 0);
  std::ofstream(base + "/dev/nvidia9") << "";
  std::ofstream(base + "/proc/devices") << "Character devices:\n195 nvidia-frontend\n511 nvidia-uvm\n\nBlock devices:\n";
  auto host = sys::HostRoot::open(base);
  ASSERT_TRUE(host.ok());

  Fake fake(kFull, "");
  auto backend = make_nvml_backend(*host, options(kFull));
  const proc::DeviceMatcher m = backend->device_matcher();
  auto node = [&m](const std::string& path) -> const proc::DeviceNode* {
    for (const auto& n : m.nodes) {
      if (n.path == path) return &n;
    }
    return nullptr;
  };
  EXPECT_NE(node("/dev/nvidia9"), nullptr);  // found under the root
  ASSERT_NE(node("/dev/nvidia4"), nullptr);  // from NVML's minors
  EXPECT_EQ(node("/dev/nvidia4")->rdev, makedev(195, 4));
  EXPECT_NE(node("/dev/nvidia5"), nullptr);
  EXPECT_EQ(node("/dev/nvidia0"), nullptr);  // minors, not indices
  ASSERT_NE(node("/dev/nvidiactl"), nullptr);
  EXPECT_EQ(node("/dev/nvidiactl")->rdev, makedev(195, 255));
  EXPECT_NE(node("/dev/nvidia-uvm"), nullptr);
  EXPECT_NE(std::find(m.majors.begin(), m.majors.end(), 195U), m.majors.end());
  EXPECT_NE(std::find(m.majors.begin(), m.majors.end(), 511U), m.majors.end());  // nvidia-uvm's dynamic major

  std::filesystem::remove_all(base);
}

// A driver without nvmlDeviceGetMemoryInfo_v2 (before R510): v1's `used`
// includes reserved memory, so ghost memory is what no listed process explains
// beyond the threshold plus the allowance for reserved memory (issue 12).
TEST(NvmlGhostMemory, OnAV1OnlyDriverAnIdleGpuIsNoGhostAndThreeGibUnexplainedIsOne) {
  for (const auto& [scenario, ghost] : {std::pair{"idle", false}, std::pair{"ghost_3g", true}}) {
    SCOPED_TRACE(scenario);
    Fake fake(kLegacy, scenario);
    auto backend = make_nvml_backend(root(), options(kLegacy));
    auto gpu = backend->snapshot();
    ASSERT_TRUE(gpu.ok()) << gpu.error().message;
    ASSERT_FALSE(gpu->devices.empty());
    const GpuDevice& d0 = gpu->devices[0];
    ASSERT_TRUE(d0.memory.has_value());
    EXPECT_FALSE(d0.memory->reserved.has_value());  // v1 accounting only
    EXPECT_TRUE(d0.processes.empty());
    EXPECT_EQ(fake.calls("nvmlDeviceGetMemoryInfo"), 2);

    node::NodeSnapshot snap;
    snap.gpu = std::move(gpu.value());
    snap.gpu_backend = "nvml";
    snap.gpu_descriptors_visible = true;
    const auto found = findings::detect_ghost_memory(snap, {});
    if (!ghost) {
      EXPECT_EQ(d0.memory.value_or(GpuMemory{}).used, 615 * kMiB);
      EXPECT_TRUE(found.empty()) << found[0].message;
      continue;
    }
    ASSERT_EQ(found.size(), 1U);
    EXPECT_EQ(found[0].device, 0U);
    EXPECT_EQ(found[0].severity, findings::Severity::critical);
    EXPECT_EQ(found[0].message,
              "GPU 0 (GPU-fake-0) has 3687 MiB used by v1 accounting (reserved memory included: "
              "the driver has no v2 memory info), 3687 MiB of it explained by no listed process: "
              "more than the 128 MiB threshold plus 1024 MiB allowed for reserved memory");
  }
}

}  // namespace
}  // namespace gpureap::gpu
