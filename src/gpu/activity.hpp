// Utilization over time: a short window per driver-listed process, built from
// nvmlDeviceGetProcessUtilization readings (every sampling period) and the
// driver's process lists (at each scan). The sampler is a source: it only
// records what the driver said and when; `summarize` hands the node snapshot
// plain data, and the detectors (idle_holder, nccl_spin) judge it.
//
// Absence means idle: the driver lists only processes with non-zero
// utilization since the last reading, so a listed process missing from every
// reading ran nothing, where the device supports the query (not MIG).
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpu/gpu_snapshot.hpp"
#include "sys/error.hpp"

namespace gpureap::gpu {

// What the window holds about one process the driver lists.
struct ProcessActivity {
  unsigned device = 0;
  std::uint32_t pid = 0;             // as the driver lists it
  double observed_s = 0;             // seen listed while sampling was continuous, up to now
  double idle_s = 0;                 // trailing time at 0 % SM: since its last busy sample or since observed
  std::optional<double> sm_mean;     // mean SM % over the readings that covered it (absent = 0); nullopt: none did
  unsigned sm_max = 0;
  unsigned readings = 0;             // utilization readings that covered it
  std::optional<std::uint64_t> memory_min;  // the driver's number over the window's process lists
  std::optional<std::uint64_t> memory_max;
  bool operator==(const ProcessActivity&) const = default;
};

struct DeviceActivity {
  unsigned index = 0;
  bool supported = true;             // false: absence says nothing (MIG, old GPU, backend without it)
  std::string unsupported_reason;
  bool operator==(const DeviceActivity&) const = default;
};

struct Activity {
  double window_s = 0;               // how far back the summary looks
  double period_s = 0;               // the sampling period
  std::vector<DeviceActivity> devices;
  std::vector<ProcessActivity> processes;  // sorted by device, pid
  std::string error;                 // the last reading's failure, empty when it succeeded
  [[nodiscard]] const ProcessActivity* find(unsigned device, std::uint32_t pid) const;
  [[nodiscard]] const DeviceActivity* device(unsigned index) const;
};

class ActivitySampler {
 public:
  using Clock = std::chrono::system_clock;  // the driver stamps samples with CPU (wall) time
  // `window`: how much history is kept and summarized; `period`: how often
  // readings are taken (a gap of three periods breaks continuity).
  ActivitySampler(std::chrono::milliseconds window, std::chrono::milliseconds period);

  // The `since` to pass to the next GpuBackend::process_utilization call.
  [[nodiscard]] std::uint64_t since_us() const { return last_reading_us_; }
  // One utilization reading taken at `now`. A failed reading breaks continuity
  // on every device.
  void add_utilization(const sys::Result<std::vector<DeviceUtilization>>& reading, Clock::time_point now);
  // The driver's process list and memory at `now` (every scan). Processes no
  // longer listed are forgotten.
  void add_listing(const GpuSnapshot& gpu, Clock::time_point now);
  [[nodiscard]] Activity summarize(Clock::time_point now) const;
  // Entries held, for the soak test's bound.
  [[nodiscard]] std::size_t size() const;

 private:
  struct Tracked {
    std::uint64_t first_listed_us = 0;
    std::uint64_t last_busy_us = 0;                           // 0: never busy in the window
    std::deque<std::pair<std::uint64_t, unsigned>> busy;      // (reading time, SM %) where > 0
    std::deque<std::pair<std::uint64_t, std::uint64_t>> memory;  // (list time, bytes)
  };
  struct DeviceState {
    DeviceActivity info;
    std::uint64_t covered_since_us = 0;     // readings continuous and supported since; 0: not covered
    std::deque<std::uint64_t> readings;     // reading times in the window
  };
  void prune(std::uint64_t now_us);

  std::uint64_t window_us_;
  std::uint64_t period_us_;
  std::uint64_t last_reading_us_ = 0;
  std::string error_;
  std::map<unsigned, DeviceState> devices_;
  std::map<std::pair<unsigned, std::uint32_t>, Tracked> tracked_;
};

}  // namespace gpureap::gpu
