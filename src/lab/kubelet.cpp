#include "lab/kubelet.hpp"

#include <poll.h>
#include <signal.h>

#include <algorithm>

#include "sys/pidfd.hpp"

namespace gpureap::lab {

namespace {

std::chrono::nanoseconds to_duration(double seconds) {
  return std::chrono::nanoseconds(static_cast<long long>(std::max(seconds, 0.0) * 1e9));
}

// Waits until every pidfd reports an exit, or the deadline.
bool wait_all(const std::vector<sys::UniqueFd>& fds, Clock::time_point deadline) {
  for (const auto& fd : fds) {
    for (;;) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
      if (left <= 0) return false;
      pollfd p{fd.get(), POLLIN, 0};
      const int rc = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
      if (rc < 0 && errno == EINTR) continue;
      if (rc == 0) return false;
      break;
    }
  }
  return true;
}

}  // namespace

double remaining_grace(double grace_s, double prestop_elapsed_s, double min_grace_s) {
  return std::max(grace_s - prestop_elapsed_s, min_grace_s);
}

TerminationEvents delete_pod(Container& container, const TerminationPlan& plan,
                             Clock::time_point t0,
                             const std::function<sys::Result<Spawned>()>& start_prestop) {
  auto since = [&] { return std::chrono::duration<double>(Clock::now() - t0).count(); };
  TerminationEvents ev;
  // 1. preStop, bounded by the whole grace.
  Spawned hook;
  if (plan.prestop) {
    ev.prestop_started_s = since();
    if (auto h = start_prestop()) {
      hook = std::move(*h);
      ev.prestop_exit = hook.wait(to_duration(plan.grace_s - since()));
      ev.prestop_timed_out = !ev.prestop_exit.has_value();
    }
    ev.prestop_ended_s = since();
  }
  // 2. SIGTERM to PID 1, and only to it.
  ev.remaining_grace_s = remaining_grace(plan.grace_s, since(), plan.min_grace_s);
  ev.term_pid1_s = since();
  (void)sys::pidfd_send_signal(container.init_pidfd(), SIGTERM);
  // 3. The remaining grace, then SIGKILL to PID 1.
  const auto kill_at = Clock::now() + to_duration(ev.remaining_grace_s);
  ev.pid1_status = container.reap_init(kill_at - Clock::now());
  if (!ev.pid1_status) {
    ev.kill_pid1_s = since();
    (void)sys::pidfd_send_signal(container.init_pidfd(), SIGKILL);
    ev.pid1_status = container.reap_init(std::chrono::seconds(30));
  }
  if (ev.pid1_status) ev.pid1_exited_s = since();
  // 4. Whatever is left in the pod's cgroup (a process in D state, or one
  //    outside the PID namespace).
  ev.kill_cgroup_s = since();
  auto left = kill_cgroup(container.cgroup(), SIGKILL);
  ev.killed_in_cgroup = static_cast<unsigned>(left.size());
  if (wait_all(left, Clock::now() + std::chrono::seconds(30))) ev.cgroup_empty_s = since();
  // A hook that outlived the grace died with its container; reap its helper.
  if (hook.running()) hook.kill_and_reap();
  return ev;
}

}  // namespace gpureap::lab
