#include "lab/sampler.hpp"

namespace gpureap::lab {

std::uint64_t attributed_bytes(const gpu::GpuSnapshot& snap, const std::optional<unsigned>& device,
                               const std::set<pid_t>& pids) {
  std::uint64_t total = 0;
  for (const auto& d : snap.devices) {
    if (device) {
      if (d.index == *device && d.memory) total += d.memory->used;
      continue;
    }
    for (const auto& p : d.processes) {
      if (p.used_memory && pids.count(static_cast<pid_t>(p.pid)) != 0) total += *p.used_memory;
    }
  }
  return total;
}

GpuSampler::GpuSampler(std::unique_ptr<gpu::GpuBackend> backend, std::chrono::milliseconds period)
    : backend_(std::move(backend)), period_(period), thread_([this] { loop(); }) {}

GpuSampler::~GpuSampler() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

GpuSampler::Id GpuSampler::add(Attribution attribution) {
  std::lock_guard lock(mu_);
  entries_.push_back(Entry{std::move(attribution), {}, std::nullopt, false, {}, {}});
  return entries_.size() - 1;
}

void GpuSampler::wait_for_tick(std::unique_lock<std::mutex>& lock, std::uint64_t after) {
  cv_.wait(lock, [&] { return stop_ || seq_ > after; });
}

std::optional<std::uint64_t> GpuSampler::now(Id id) {
  std::unique_lock lock(mu_);
  ++demand_;
  cv_.notify_all();
  // A tick already under way may have read the driver before this call: wait for the next one.
  const std::uint64_t start = seq_;
  wait_for_tick(lock, start + 1);
  --demand_;
  return entries_.at(id).latest;
}

std::optional<std::uint64_t> GpuSampler::wait_until(Id id,
                                                    const std::function<bool(std::uint64_t)>& done,
                                                    Clock::duration timeout) {
  const auto deadline = Clock::now() + timeout;
  std::unique_lock lock(mu_);
  ++demand_;
  cv_.notify_all();
  const std::uint64_t start = seq_ + 1;  // samples taken after this call only
  cv_.wait_until(lock, deadline, [&] {
    const auto& e = entries_.at(id);
    return stop_ || (seq_ > start && e.latest && done(*e.latest));
  });
  --demand_;
  return entries_.at(id).latest;
}

void GpuSampler::start_recording(Id id, Clock::time_point t0) {
  std::lock_guard lock(mu_);
  auto& e = entries_.at(id);
  if (!e.recording) ++demand_;
  e.recording = true;
  e.t0 = t0;
  e.series.clear();
  cv_.notify_all();
}

std::vector<Sample> GpuSampler::stop_recording(Id id) {
  std::lock_guard lock(mu_);
  auto& e = entries_.at(id);
  if (e.recording) --demand_;
  e.recording = false;
  return std::move(e.series);
}

std::optional<std::uint64_t> GpuSampler::latest(Id id) {
  std::lock_guard lock(mu_);
  return entries_.at(id).latest;
}

std::set<pid_t> GpuSampler::pids(Id id) {
  std::lock_guard lock(mu_);
  return entries_.at(id).pids;
}

std::size_t GpuSampler::errors() {
  std::lock_guard lock(mu_);
  return errors_;
}

void GpuSampler::loop() {
  auto next = Clock::now();
  std::unique_lock lock(mu_);
  for (;;) {
    cv_.wait(lock, [&] { return stop_ || demand_ > 0; });
    if (stop_) return;
    lock.unlock();
    tick();
    lock.lock();
    // Fixed-rate ticks: a slow reading shortens the pause, never shifts the grid.
    next = std::max(next + period_, Clock::now() - period_);
    cv_.wait_until(lock, next, [&] { return stop_; });
  }
}

void GpuSampler::tick() {
  // The cgroups are read first: a process that dies between the two readings
  // is still counted by PID.
  std::vector<std::optional<PodCgroup>> cgroups;
  {
    std::lock_guard lock(mu_);
    for (const auto& e : entries_) cgroups.push_back(e.attribution.cgroup);
  }
  std::vector<std::vector<pid_t>> members(cgroups.size());
  for (std::size_t i = 0; i < cgroups.size(); ++i) {
    if (!cgroups[i]) continue;
    if (auto p = cgroups[i]->procs()) members[i] = std::move(*p);
  }
  auto snap = backend_->snapshot();
  const auto taken = Clock::now();
  std::lock_guard lock(mu_);
  if (!snap) ++errors_;
  for (std::size_t i = 0; i < members.size() && i < entries_.size(); ++i) {
    auto& e = entries_[i];
    e.pids.insert(members[i].begin(), members[i].end());
    if (!snap) continue;
    const std::uint64_t bytes = attributed_bytes(*snap, e.attribution.device, e.pids);
    e.latest = bytes;
    if (e.recording && taken >= e.t0) {
      e.series.push_back(Sample{std::chrono::duration<double>(taken - e.t0).count(), bytes});
    }
  }
  ++seq_;
  cv_.notify_all();
}

}  // namespace gpureap::lab
