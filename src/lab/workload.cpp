#include "lab/workload.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "lab/reading.hpp"

namespace gpureap::lab {

namespace {

// The plan's worker holds 8 tensors of 256 MiB (2 GiB); the torch programs
// take a tensor count.
constexpr std::uint64_t kTensorBytes = 256ULL << 20;

}  // namespace

WorkloadCommand parent_command(const Toolbox& tools, const LabNode& node, Workload workload,
                               GpuKind gpu, const ScenarioDef& scenario, unsigned workers,
                               unsigned device, TimeScale scale) {
  WorkloadCommand cmd;
  const std::string exit_after = seconds_text(scale(kParentExitAfterS));
  if (workload == Workload::torch) {
    const std::string py = node.python_dir();
    cmd.argv = {tools.python3, py + "/parent.py",       "--exit-after", exit_after,
                "--count",     std::to_string(workers), "--",           tools.python3};
    cmd.argv.push_back(
        py + (scenario.worker == Worker::cleans_up ? "/gpu_worker_fixed.py" : "/gpu_worker.py"));
    cmd.argv.insert(cmd.argv.end(), {"--device", std::to_string(device), "--tensors",
                                     std::to_string(kWorkerBytes / kTensorBytes)});
    if (scenario.worker == Worker::forks_after_init) {
      cmd.argv.insert(cmd.argv.end(),
                      {"--fork-children", std::to_string(scenario.forked_children)});
    }
    cmd.env = {"PYTHONUNBUFFERED=1", "HOME=/tmp"};
    return cmd;
  }
  const std::string& worker = gpu == GpuKind::sim ? tools.worker : tools.worker_dynamic;
  cmd.argv = worker_command(scenario, worker, workers, gpu == GpuKind::sim ? "sim" : "cuda", device,
                            scale);
  if (gpu == GpuKind::sim) cmd.argv.insert(cmd.argv.end(), {"--sim-dir", node.sim_dir()});
  return cmd;
}

sys::Result<std::unique_ptr<WorkloadLog>> WorkloadLog::open(const std::string& path,
                                                            Clock::time_point t0) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return sys::errno_error(errno, "pipe2");
  sys::UniqueFd r(p[0]), w(p[1]);
  const int ev = ::eventfd(0, EFD_CLOEXEC);
  if (ev < 0) return sys::errno_error(errno, "eventfd");
  sys::UniqueFd stop(ev);
  auto file = open_log(path);
  if (!file) return file.error();
  return std::unique_ptr<WorkloadLog>(
      new WorkloadLog(std::move(r), std::move(w), std::move(stop), std::move(*file), t0));
}

WorkloadLog::WorkloadLog(sys::UniqueFd read, sys::UniqueFd write, sys::UniqueFd stop,
                         sys::UniqueFd file, Clock::time_point t0)
    : read_(std::move(read)),
      write_(std::move(write)),
      stop_(std::move(stop)),
      file_(std::move(file)),
      t0_(t0),
      thread_([this] { loop(); }) {}

WorkloadLog::~WorkloadLog() {
  write_.reset();
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t n = ::write(stop_.get(), &one, sizeof one);
  thread_.join();
}

void WorkloadLog::loop() {
  char buf[4096];
  for (;;) {
    pollfd fds[2] = {{read_.get(), POLLIN, 0}, {stop_.get(), POLLIN, 0}};
    const int rc = ::poll(fds, 2, -1);
    if (rc < 0) {
      if (errno == EINTR) continue;
      return;
    }
    // Stop only once the pipe has nothing more to give right now.
    if ((fds[0].revents & (POLLIN | POLLHUP)) == 0 && (fds[1].revents & POLLIN) != 0) return;
    if ((fds[0].revents & (POLLIN | POLLHUP)) == 0) continue;
    const ssize_t n = ::read(read_.get(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      // EOF: every writer is gone. Wait for the stop request so the
      // destructor's join never races the end of the pipe.
      if (!partial_.empty()) take_line(partial_);
      partial_.clear();
      pollfd s{stop_.get(), POLLIN, 0};
      while (::poll(&s, 1, -1) < 0 && errno == EINTR) {
      }
      return;
    }
    partial_.append(buf, static_cast<std::size_t>(n));
    for (auto nl = partial_.find('\n'); nl != std::string::npos; nl = partial_.find('\n')) {
      take_line(std::string_view(partial_).substr(0, nl));
      partial_.erase(0, nl + 1);
    }
  }
}

void WorkloadLog::take_line(std::string_view line) {
  const double t = std::chrono::duration<double>(Clock::now() - t0_).count();
  std::string out = fmt::format("[{:8.3f}] ", t);
  out.append(line);
  out.push_back('\n');
  [[maybe_unused]] ssize_t n = ::write(file_.get(), out.data(), out.size());
  if (line.empty() || line.front() != '{') return;
  auto j = nlohmann::json::parse(line, nullptr, false);
  if (!j.is_object()) return;
  std::lock_guard lock(mu_);
  lines_.push_back(WorkloadEvent{t, std::move(j)});
  cv_.notify_all();
}

std::size_t WorkloadLog::count() {
  std::lock_guard lock(mu_);
  return lines_.size();
}

sys::Result<std::vector<WorkloadEvent>> WorkloadLog::wait_workers(std::size_t from, unsigned n,
                                                                  Clock::duration timeout) {
  std::unique_lock lock(mu_);
  std::vector<WorkloadEvent> workers;
  std::string failure;
  const bool done = cv_.wait_for(lock, timeout, [&] {
    workers.clear();
    bool parent = false;
    for (std::size_t i = from; i < lines_.size(); ++i) {
      const auto mode = text_field(lines_[i].line, "mode");
      if (mode == "hold" || mode == "fork-after-init") workers.push_back(lines_[i]);
      parent = parent || mode == "parent";
      if (text_field(lines_[i].line, "event") == "error")
        failure = text_field(lines_[i].line, "message");
    }
    return !failure.empty() || (parent && workers.size() >= n);
  });
  if (!failure.empty()) return sys::Error{EIO, "a worker failed: " + failure};
  if (!done) {
    return sys::Error{ETIMEDOUT, std::to_string(workers.size()) + " of " + std::to_string(n) +
                                     " worker(s) ready after the time limit"};
  }
  return workers;
}

std::vector<WorkloadEvent> WorkloadLog::events(const std::string& name) {
  std::lock_guard lock(mu_);
  std::vector<WorkloadEvent> out;
  for (const auto& l : lines_) {
    if (text_field(l.line, "event") == name) out.push_back(l);
  }
  return out;
}

}  // namespace gpureap::lab
