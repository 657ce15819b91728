#include "prestop/act.hpp"

#include <fmt/format.h>
#include <poll.h>
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "proc/identity.hpp"
#include "sys/pidfd.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::prestop {

std::string_view to_string(Outcome o) {
  switch (o) {
    case Outcome::exited: return "exited";
    case Outcome::killed: return "killed";
    case Outcome::survived: return "survived";
    case Outcome::gone: return "gone";
    case Outcome::pid_reused: return "pid_reused";
    case Outcome::not_identified: return "not_identified";
    case Outcome::dry_run: return "dry_run";
  }
  return "survived";
}

namespace {

std::string who(const Target& t) {
  std::string s = fmt::format("pid {} ({}", t.pid, t.comm);
  if (!t.devices.empty()) {
    s += "; gpu";
    for (std::size_t i = 0; i < t.devices.size(); ++i) s += fmt::format("{}{}", i ? "," : " ", t.devices[i]);
  } else {
    s += fmt::format("; {} gpu fds", t.gpu_fds);
  }
  if (t.gpu_memory) s += fmt::format("; {} MiB", *t.gpu_memory / (1024ULL * 1024ULL));
  return s + ")";
}

std::string secs(double s) { return fmt::format("{:.3f} s", s); }

std::string memory_part(const TargetResult& r) {
  if (!r.memory_released) return {};
  if (!*r.memory_released) return "; GPU memory still listed by the driver at the deadline";
  if (r.target.driver_pids.empty()) return "; not listed by the driver";
  return r.release_after_s ? "; GPU memory released after " + secs(*r.release_after_s) : std::string();
}

}  // namespace

std::string describe(const TargetResult& r) {
  const std::string w = who(r.target);
  const std::string err = r.error.empty() ? std::string() : " (" + r.error + ")";
  switch (r.outcome) {
    case Outcome::exited:
      return w + ": SIGTERM; exited after " + secs(r.exit_after_s.value_or(0)) + memory_part(r);
    case Outcome::killed:
      return w + ": SIGTERM ignored for " + secs(r.kill_after_s.value_or(0)) + "; SIGKILL; exited after " +
             secs(r.exit_after_s.value_or(0)) + memory_part(r);
    case Outcome::survived: {
      std::string s = w + ": ";
      s += r.term_sent ? "SIGTERM" : "SIGTERM not sent";
      if (r.kill_sent) s += "; SIGKILL after " + secs(r.kill_after_s.value_or(0));
      return s + "; still running at the deadline: survived" + err;
    }
    case Outcome::gone: return w + ": exited before it was signalled";
    case Outcome::pid_reused:
      return w + ": pid reused between scan and signal (start time changed): not signalled";
    case Outcome::not_identified: return w + ": not identified" + err + ": not signalled";
    case Outcome::dry_run: return w + ": would SIGTERM, then SIGKILL if it stays (dry run)";
  }
  return w;
}

bool ActReport::all_gone() const {
  return std::all_of(results.begin(), results.end(), [](const TargetResult& r) {
    if (r.outcome == Outcome::survived) return false;
    return !r.memory_released || *r.memory_released;
  });
}

namespace {

struct Tracked {
  std::size_t index = 0;  // into the results
  sys::UniqueFd pidfd;
  bool exited = false;
  bool released = false;
  bool done = false;  // logged and final
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

bool none_listed(const Target& t, const std::vector<std::uint32_t>& now) {
  return std::none_of(t.driver_pids.begin(), t.driver_pids.end(),
                      [&](std::uint32_t p) { return std::find(now.begin(), now.end(), p) != now.end(); });
}

}  // namespace

ActReport act(const sys::HostRoot& root, const std::vector<Target>& targets, const ListedPids& listed,
              const ActOptions& options, const LogSink& log) {
  ActReport rep;
  const auto emit = [&](const std::string& line) {
    if (log) log(line);
  };
  const Clock::time_point deadline_at = options.start + options.deadline;

  // 1. Identify: a pidfd only for the very process the scan saw.
  std::vector<Tracked> tracked;
  for (std::size_t i = 0; i < targets.size(); ++i) {
    TargetResult r;
    r.target = targets[i];
    auto fd = proc::open_verified_pidfd(root, r.target.pid, r.target.start_time);
    if (!fd) {
      const auto& e = fd.error();
      r.outcome = e.code == ESTALE ? Outcome::pid_reused : e.vanished() ? Outcome::gone : Outcome::not_identified;
      r.error = e.message;
      emit(describe(r));
    } else if (options.dry_run) {
      r.outcome = Outcome::dry_run;
      emit(describe(r));
    } else {
      Tracked t;
      t.index = i;
      t.pidfd = std::move(fd.value());
      tracked.push_back(std::move(t));
    }
    rep.results.push_back(std::move(r));
  }

  // 2. SIGTERM, all at once: the measured times start here.
  const Clock::time_point term_at = Clock::now();
  for (auto& t : tracked) {
    auto& r = rep.results[t.index];
    auto st = sys::pidfd_send_signal(t.pidfd.get(), SIGTERM);
    if (st) {
      r.term_sent = true;
    } else if (st.error().code == ESRCH) {
      r.term_sent = true;  // exited between the check and the signal: the poll reports it
    } else {
      r.error = "SIGTERM: " + st.error().message;
    }
  }
  const Clock::time_point kill_at = std::min(term_at + options.term_wait, deadline_at);
  bool kill_phase = false;

  // 3. Wait on the pidfds; the driver is re-read only while an exited target's
  // memory is still listed (memory release has no event to wait on).
  const auto check_release = [&](Clock::time_point now) {
    bool pending = false;
    for (const auto& t : tracked) pending = pending || (t.exited && !t.released);
    if (!pending || !listed) return;
    auto pids = listed();
    if (!pids) return;  // the driver could not be read this time: try again at the next poll
    for (auto& t : tracked) {
      if (!t.exited || t.released) continue;
      auto& r = rep.results[t.index];
      if (none_listed(r.target, *pids)) {
        t.released = true;
        r.release_after_s = seconds(now - term_at);
      }
    }
  };

  for (;;) {
    Clock::time_point now = Clock::now();
    for (auto& t : tracked) {
      if (t.done || !t.exited || !t.released) continue;
      auto& r = rep.results[t.index];
      r.outcome = r.kill_sent ? Outcome::killed : Outcome::exited;
      r.memory_released = true;
      t.done = true;
      emit(describe(r));
    }
    if (std::all_of(tracked.begin(), tracked.end(), [](const Tracked& t) { return t.done; })) break;
    if (!kill_phase && now >= kill_at) {
      kill_phase = true;
      for (auto& t : tracked) {
        if (t.exited) continue;
        auto& r = rep.results[t.index];
        auto st = sys::pidfd_send_signal(t.pidfd.get(), SIGKILL);
        if (st) {
          r.kill_sent = true;
          r.kill_after_s = seconds(now - term_at);
        } else if (st.error().code != ESRCH) {  // ESRCH: it exited meanwhile; the poll reports it
          r.error += (r.error.empty() ? "" : "; ") + std::string("SIGKILL: ") + st.error().message;
        }
      }
    }
    if (now >= deadline_at) break;

    Clock::time_point wake = kill_phase ? deadline_at : kill_at;
    const bool pending = std::any_of(tracked.begin(), tracked.end(),
                                     [](const Tracked& t) { return t.exited && !t.released; });
    if (pending) wake = std::min(wake, now + options.release_poll);
    std::vector<pollfd> fds;
    std::vector<std::size_t> which;
    for (std::size_t k = 0; k < tracked.size(); ++k) {
      if (tracked[k].exited) continue;
      fds.push_back(pollfd{tracked[k].pidfd.get(), POLLIN, 0});
      which.push_back(k);
    }
    // Round up: waking a little late is fine, spinning on a 0 ms timeout is not.
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(wake - now).count();
    const int timeout = static_cast<int>(std::clamp<long long>(left, 0, 60'000));
    const int n = ::poll(fds.data(), fds.size(), timeout);
    if (n < 0 && errno != EINTR) {
      const std::string e = std::strerror(errno);
      for (auto& t : tracked) rep.results[t.index].error = "poll: " + e;
      break;
    }
    now = Clock::now();
    for (std::size_t k = 0; k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      auto& t = tracked[which[k]];
      auto& r = rep.results[t.index];
      t.exited = true;
      r.exit_after_s = seconds(now - term_at);
      if (r.target.driver_pids.empty()) t.released = true;  // the driver says nothing about it
    }
    check_release(now);
  }

  // 4. What is left at the deadline.
  for (auto& t : tracked) {
    if (t.done) continue;
    auto& r = rep.results[t.index];
    if (t.exited) {
      r.outcome = r.kill_sent ? Outcome::killed : Outcome::exited;
      r.memory_released = false;
    } else {
      r.outcome = Outcome::survived;
    }
    t.done = true;
    emit(describe(r));
  }
  rep.total_s = seconds(Clock::now() - options.start);
  return rep;
}

}  // namespace gpureap::prestop
