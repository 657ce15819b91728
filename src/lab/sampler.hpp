// The GPU memory of each scenario, sampled on one thread for the whole lab
// (one driver reading per tick, every 10 ms while anyone needs samples), so
// scenarios run at once keep separate accounts:
//   - by device, where a scenario has one to itself (the simulated GPU gives
//     every pod its own, as `nvidia.com/gpu: 1` does);
//   - else by process: the driver's per-process memory of every host PID ever
//     seen in the scenario's cgroup (a dead creator's PID stays counted).
#pragma once

#include <sys/types.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "gpu/backend.hpp"
#include "lab/cgroup.hpp"
#include "lab/process.hpp"

namespace gpureap::lab {

struct Sample {
  double t = 0;             // seconds since the recording started
  std::uint64_t bytes = 0;  // the scenario's GPU memory
};

struct Attribution {
  std::optional<unsigned> device;   // a device of its own
  std::optional<PodCgroup> cgroup;  // else the processes of this cgroup
};

// Pure: the bytes `snap` attributes to a scenario owning `device`, or to the
// processes `pids` (driver PIDs as the caller's namespace sees them).
std::uint64_t attributed_bytes(const gpu::GpuSnapshot& snap, const std::optional<unsigned>& device,
                               const std::set<pid_t>& pids);

class GpuSampler {
 public:
  using Id = std::size_t;
  GpuSampler(std::unique_ptr<gpu::GpuBackend> backend, std::chrono::milliseconds period);
  GpuSampler(const GpuSampler&) = delete;
  GpuSampler& operator=(const GpuSampler&) = delete;
  GpuSampler(GpuSampler&&) = delete;
  GpuSampler& operator=(GpuSampler&&) = delete;
  ~GpuSampler();

  Id add(Attribution attribution);
  // The scenario's bytes on a sample taken after this call (blocks for it);
  // nullopt when the driver could not be read.
  std::optional<std::uint64_t> now(Id id);
  // Waits for a sample whose bytes satisfy `done`, or `timeout`; the last bytes seen.
  std::optional<std::uint64_t> wait_until(Id id, const std::function<bool(std::uint64_t)>& done,
                                          Clock::duration timeout);
  // Keeps every sample from t0 on (at the full rate) until stop_recording.
  void start_recording(Id id, Clock::time_point t0);
  std::vector<Sample> stop_recording(Id id);
  // The bytes of the newest sample, without waiting (nullopt before the first).
  std::optional<std::uint64_t> latest(Id id);
  // Host PIDs ever seen in the scenario's cgroup.
  std::set<pid_t> pids(Id id);
  [[nodiscard]] std::chrono::milliseconds period() const { return period_; }
  // Readings the driver refused (a gap in the series, never a zero).
  std::size_t errors();

 private:
  struct Entry {
    Attribution attribution;
    std::set<pid_t> pids;
    std::optional<std::uint64_t> latest;
    bool recording = false;
    Clock::time_point t0;
    std::vector<Sample> series;
  };
  void loop();
  void tick();
  // Blocks until `seq_` has moved past `after`; the caller holds `lock`.
  void wait_for_tick(std::unique_lock<std::mutex>& lock, std::uint64_t after);

  std::unique_ptr<gpu::GpuBackend> backend_;
  std::chrono::milliseconds period_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> entries_;
  unsigned demand_ = 0;  // recordings + waiters: the thread samples while > 0
  std::uint64_t seq_ = 0;
  std::size_t errors_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace gpureap::lab
