// The scenario's workload: the commands that start the plan's parent and its
// GPU workers (the C++ worker on the simulated GPU or CUDA's driver API, or
// the plan's three Python programs), and the log that reads their output.
// Workers announce themselves with one JSON line ({"mode": "hold", "pid": …}),
// a cleaning worker its SIGTERM ({"event": "sigterm"}): the lab waits on those
// lines, never on a sleep.
#pragma once

#include <sys/types.h>

#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "lab/node.hpp"
#include "lab/process.hpp"
#include "lab/scenario.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::lab {

enum class Workload : std::uint8_t { cpp, torch };
enum class GpuKind : std::uint8_t { sim, nvml };

// The parent's command line for one spawn of a scenario's workers.
struct WorkloadCommand {
  std::vector<std::string> argv;
  std::vector<std::string> env;
};
WorkloadCommand parent_command(const Toolbox& tools, const LabNode& node, Workload workload,
                               GpuKind gpu, const ScenarioDef& scenario, unsigned workers,
                               unsigned device, TimeScale scale);

// One line the workload printed, parsed.
struct WorkloadEvent {
  double t = 0;         // seconds since the log was opened
  nlohmann::json line;  // the JSON object
};

class WorkloadLog {
 public:
  // Lines go to `path`, each prefixed with its time since `t0`.
  static sys::Result<std::unique_ptr<WorkloadLog>> open(const std::string& path,
                                                        Clock::time_point t0);
  WorkloadLog(const WorkloadLog&) = delete;
  WorkloadLog& operator=(const WorkloadLog&) = delete;
  WorkloadLog(WorkloadLog&&) = delete;
  WorkloadLog& operator=(WorkloadLog&&) = delete;
  ~WorkloadLog();

  // The pipe's write end: the stdout and stderr of what the lab execs.
  [[nodiscard]] int write_fd() const { return write_.get(); }
  // JSON lines seen so far.
  [[nodiscard]] std::size_t count();
  // Waits until `n` lines whose "mode" is a worker's ("hold", "fork-after-init")
  // and one whose "mode" is "parent" arrived after line `from`. An error
  // naming why, when a worker reported {"event": "error"} or `timeout` passed.
  sys::Result<std::vector<WorkloadEvent>> wait_workers(std::size_t from, unsigned n,
                                                       Clock::duration timeout);
  // Every line carrying "event": `name`.
  std::vector<WorkloadEvent> events(const std::string& name);

 private:
  WorkloadLog(sys::UniqueFd read, sys::UniqueFd write, sys::UniqueFd stop, sys::UniqueFd file,
              Clock::time_point t0);
  void loop();
  void take_line(std::string_view line);

  sys::UniqueFd read_;
  sys::UniqueFd write_;
  sys::UniqueFd stop_;  // an eventfd: the reader drains and ends
  sys::UniqueFd file_;
  Clock::time_point t0_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<WorkloadEvent> lines_;
  std::string partial_;
  std::thread thread_;
};

}  // namespace gpureap::lab
