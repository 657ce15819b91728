// The GPU side of a node snapshot, in the schema `--gpu json:FILE` replays and
// `gpureap trace --json` prints under "gpu". Values the driver could not give
// are std::nullopt, never 0 ("unsupported" is not "zero").
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace gpureap::gpu {

struct GpuProcess {
  std::uint32_t pid = 0;                   // as the driver reports it (caller's PID namespace)
  std::optional<std::uint64_t> used_memory;  // bytes; nullopt = not available
  bool operator==(const GpuProcess&) const = default;
};

struct GpuMemory {
  std::uint64_t total = 0;
  std::uint64_t used = 0;                   // v2 accounting: excludes reserved
  std::optional<std::uint64_t> reserved;    // nullopt when only v1 was available
  bool operator==(const GpuMemory&) const = default;
};

struct GpuDevice {
  unsigned index = 0;
  std::string uuid;
  std::optional<unsigned> minor;  // N of /dev/nvidiaN
  std::string name;
  std::optional<GpuMemory> memory;
  std::vector<GpuProcess> processes;  // compute and graphics, merged by pid
  bool operator==(const GpuDevice&) const = default;
};

struct GpuSnapshot {
  std::string driver_version;
  std::vector<GpuDevice> devices;
  bool operator==(const GpuSnapshot&) const = default;
};

// One process's utilization as nvmlDeviceGetProcessUtilization reports it.
struct UtilizationSample {
  std::uint32_t pid = 0;          // as the driver reports it (caller's PID namespace)
  std::uint64_t timestamp_us = 0; // CPU time of the sample, microseconds since the epoch
  unsigned sm_percent = 0;
  unsigned memory_percent = 0;
  bool operator==(const UtilizationSample&) const = default;
};

// One device's answer since a timestamp. Only processes with non-zero
// utilization are listed: a listed process that is absent was idle (0 %).
struct DeviceUtilization {
  unsigned index = 0;
  // False where the driver cannot say (MIG, old GPUs): absence then means
  // nothing, so no process may be judged idle.
  bool supported = true;
  std::string unsupported_reason;
  std::vector<UtilizationSample> samples;
  bool operator==(const DeviceUtilization&) const = default;
};

}  // namespace gpureap::gpu
