// One interface for every GPU source: NVML (dlopen), the simulated device, and
// JSON replay. `auto` = NVML when it loads and reports devices, else none.
#pragma once

#include <memory>
#include <string>
#include <string_view>

#include "gpu/gpu_snapshot.hpp"
#include "proc/device_matcher.hpp"
#include "sys/error.hpp"
#include "sys/host_root.hpp"

namespace gpureap::gpu {

class GpuBackend {
 public:
  virtual ~GpuBackend() = default;
  [[nodiscard]] virtual std::string_view name() const = 0;  // "nvml", "sim", "json", "none"
  // One reading of the driver's view. An Error means the backend could not be read at all.
  virtual sys::Result<GpuSnapshot> snapshot() = 0;
  // The device nodes whose descriptors mark a process as a GPU holder.
  [[nodiscard]] virtual proc::DeviceMatcher device_matcher() const = 0;
  // Why the backend has no devices, said once by the caller (empty when it has some).
  [[nodiscard]] virtual std::string unavailable_reason() const { return {}; }
  // Whether every process it lists must hold one of device_matcher()'s
  // descriptors here, so that one holding none is not the owner: true for a
  // live driver; a replayed snapshot may describe another machine.
  [[nodiscard]] virtual bool listed_processes_hold_descriptors() const { return true; }
  // Per-process SM utilization of every device since `since_us` (0: all the
  // driver keeps). An Error when the backend cannot sample at all (the
  // default: JSON replay and none have no clock of their own).
  virtual sys::Result<std::vector<DeviceUtilization>> process_utilization(std::uint64_t since_us);
  // True once a driver call never returned: a thread is stuck inside the
  // driver's library, so the process must end without running its exit-time
  // destructors (the library's own may wait on that thread forever).
  [[nodiscard]] virtual bool hung() const { return false; }
};

// Parses "auto" | "nvml" | "sim" | "json:FILE" | "none". Bad specs are an Error naming the value.
sys::Result<std::unique_ptr<GpuBackend>> make_backend(std::string_view spec, const sys::HostRoot& root);

}  // namespace gpureap::gpu
