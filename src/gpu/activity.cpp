#include "gpu/activity.hpp"

#include <algorithm>
#include <set>

namespace gpureap::gpu {

namespace {

std::uint64_t to_us(ActivitySampler::Clock::time_point t) {
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count();
  return us > 0 ? static_cast<std::uint64_t>(us) : 0;
}

double seconds(std::uint64_t us) { return static_cast<double>(us) / 1e6; }

// The process table the driver keeps is small; a runaway list must not grow the window without bound.
constexpr std::size_t kMaxTracked = 4096;

}  // namespace

const ProcessActivity* Activity::find(unsigned device_index, std::uint32_t pid) const {
  for (const auto& p : processes) {
    if (p.device == device_index && p.pid == pid) return &p;
  }
  return nullptr;
}

const DeviceActivity* Activity::device(unsigned index) const {
  for (const auto& d : devices) {
    if (d.index == index) return &d;
  }
  return nullptr;
}

ActivitySampler::ActivitySampler(std::chrono::milliseconds window, std::chrono::milliseconds period)
    : window_us_(static_cast<std::uint64_t>(std::max<std::int64_t>(window.count(), 1)) * 1000),
      period_us_(static_cast<std::uint64_t>(std::max<std::int64_t>(period.count(), 1)) * 1000) {}

void ActivitySampler::add_utilization(const sys::Result<std::vector<DeviceUtilization>>& reading,
                                      Clock::time_point now) {
  const std::uint64_t now_us = to_us(now);
  const bool gap = last_reading_us_ != 0 && now_us > last_reading_us_ + 3 * period_us_;
  last_reading_us_ = now_us;
  if (!reading) {
    error_ = reading.error().message;
    for (auto& [index, dev] : devices_) dev.covered_since_us = 0;
    return;
  }
  error_.clear();
  std::set<unsigned> seen;
  for (const auto& du : *reading) {
    seen.insert(du.index);
    DeviceState& dev = devices_[du.index];
    dev.info.index = du.index;
    dev.info.supported = du.supported;
    dev.info.unsupported_reason = du.unsupported_reason;
    if (!du.supported) {
      dev.covered_since_us = 0;
      dev.readings.clear();
      continue;
    }
    // Readings before a gap say nothing about the gap: continuity starts again.
    if (dev.covered_since_us == 0 || gap) dev.covered_since_us = now_us;
    dev.readings.push_back(now_us);
    // One value per process per reading: the mean of its samples since the last one.
    std::map<std::uint32_t, std::pair<unsigned, unsigned>> per_pid;  // pid -> (sum, count)
    for (const auto& s : du.samples) {
      auto& [sum, n] = per_pid[s.pid];
      sum += s.sm_percent;
      ++n;
    }
    for (const auto& [pid, agg] : per_pid) {
      const unsigned sm = agg.first / agg.second;
      if (sm == 0) continue;
      auto key = std::make_pair(du.index, pid);
      auto it = tracked_.find(key);
      if (it == tracked_.end()) {
        if (tracked_.size() >= kMaxTracked) continue;
        it = tracked_.emplace(key, Tracked{}).first;
      }
      it->second.busy.emplace_back(now_us, sm);
      // Busy at some moment since the last reading: the idle clock restarts now.
      it->second.last_busy_us = now_us;
    }
  }
  // A device the reading left out was not covered.
  for (auto& [index, dev] : devices_) {
    if (seen.count(index) == 0) dev.covered_since_us = 0;
  }
  prune(now_us);
}

void ActivitySampler::add_listing(const GpuSnapshot& gpu, Clock::time_point now) {
  const std::uint64_t now_us = to_us(now);
  std::set<std::pair<unsigned, std::uint32_t>> listed;
  for (const auto& d : gpu.devices) {
    for (const auto& p : d.processes) {
      auto key = std::make_pair(d.index, p.pid);
      listed.insert(key);
      auto it = tracked_.find(key);
      if (it == tracked_.end()) {
        if (tracked_.size() >= kMaxTracked) continue;
        it = tracked_.emplace(key, Tracked{}).first;
      }
      if (it->second.first_listed_us == 0) it->second.first_listed_us = now_us;
      if (p.used_memory) it->second.memory.emplace_back(now_us, *p.used_memory);
    }
  }
  // Gone from the driver's list: forgotten, so a reused PID starts afresh.
  for (auto it = tracked_.begin(); it != tracked_.end();) {
    it = listed.count(it->first) == 0 ? tracked_.erase(it) : std::next(it);
  }
  prune(now_us);
}

void ActivitySampler::prune(std::uint64_t now_us) {
  const std::uint64_t horizon = now_us > window_us_ ? now_us - window_us_ : 0;
  for (auto& [index, dev] : devices_) {
    while (!dev.readings.empty() && dev.readings.front() < horizon) dev.readings.pop_front();
  }
  for (auto& [key, t] : tracked_) {
    while (!t.busy.empty() && t.busy.front().first < horizon) t.busy.pop_front();
    while (!t.memory.empty() && t.memory.front().first < horizon) t.memory.pop_front();
  }
}

Activity ActivitySampler::summarize(Clock::time_point now) const {
  const std::uint64_t now_us = to_us(now);
  const std::uint64_t horizon = now_us > window_us_ ? now_us - window_us_ : 0;
  Activity out;
  out.window_s = seconds(window_us_);
  out.period_s = seconds(period_us_);
  out.error = error_;
  for (const auto& [index, dev] : devices_) out.devices.push_back(dev.info);
  for (const auto& [key, t] : tracked_) {
    if (t.first_listed_us == 0) continue;  // busy samples of a process the driver has not listed yet
    ProcessActivity p;
    p.device = key.first;
    p.pid = key.second;
    auto dev = devices_.find(key.first);
    const bool covered = dev != devices_.end() && dev->second.info.supported && dev->second.covered_since_us != 0;
    if (covered) {
      const std::uint64_t since = std::max({t.first_listed_us, dev->second.covered_since_us, horizon});
      p.observed_s = now_us > since ? seconds(now_us - since) : 0;
      const std::uint64_t idle_since = std::max(since, t.last_busy_us);
      p.idle_s = now_us > idle_since ? seconds(now_us - idle_since) : 0;
      unsigned long long sum = 0;
      for (const auto& [at, sm] : t.busy) {
        if (at >= since) {
          sum += sm;
          p.sm_max = std::max(p.sm_max, sm);
        }
      }
      p.readings = static_cast<unsigned>(std::count_if(dev->second.readings.begin(), dev->second.readings.end(),
                                                       [since](std::uint64_t at) { return at >= since; }));
      if (p.readings > 0) p.sm_mean = static_cast<double>(sum) / p.readings;
    }
    for (const auto& [at, bytes] : t.memory) {
      p.memory_min = std::min(p.memory_min.value_or(bytes), bytes);
      p.memory_max = std::max(p.memory_max.value_or(bytes), bytes);
    }
    out.processes.push_back(p);
  }
  return out;
}

std::size_t ActivitySampler::size() const {
  std::size_t n = 0;
  for (const auto& [index, dev] : devices_) n += dev.readings.size();
  for (const auto& [key, t] : tracked_) n += 1 + t.busy.size() + t.memory.size();
  return n;
}

}  // namespace gpureap::gpu
