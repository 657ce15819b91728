// Pod deletion exactly as the kubelet and the runtime do it (docs/lab.md cites
// the sources): run the preStop hook, its time counted against the grace; send
// SIGTERM to the container's PID 1 only; after the remaining grace (at least
// 2 s) send SIGKILL to PID 1; then SIGKILL whatever is left in the pod's cgroup.
#pragma once

#include <functional>
#include <optional>

#include "lab/process.hpp"
#include "lab/runtime.hpp"
#include "sys/error.hpp"

namespace gpureap::lab {

struct TerminationPlan {
  double grace_s = 30;     // terminationGracePeriodSeconds (scaled)
  double min_grace_s = 2;  // the kubelet's floor for the time left after preStop (scaled)
  bool prestop = false;
};

// Seconds since the deletion started; nullopt when it did not happen.
struct TerminationEvents {
  std::optional<double> prestop_started_s;
  std::optional<double> prestop_ended_s;
  std::optional<int> prestop_exit;  // the hook's status
  bool prestop_timed_out = false;   // still running when the grace ran out
  double remaining_grace_s = 0;     // given to the runtime after the hook
  double term_pid1_s = 0;
  std::optional<double> pid1_exited_s;  // PID 1 gone (on its own, or after the SIGKILL)
  std::optional<int>
      pid1_status;  // as a shell gives it: 143 = SIGTERM'd child's code, 137 = SIGKILL
  std::optional<double> kill_pid1_s;  // the runtime's SIGKILL, when PID 1 outlived the grace
  double kill_cgroup_s = 0;           // the kubelet's clean-up of the pod cgroup
  unsigned killed_in_cgroup = 0;      // processes that were still there
  std::optional<double> cgroup_empty_s;
};

// The kubelet's arithmetic: grace minus the hook's time, at least the floor.
double remaining_grace(double grace_s, double prestop_elapsed_s, double min_grace_s);

// Deletes the pod. `start_prestop` execs the hook in the container (called
// only when the plan has one). Every signal goes through a pidfd: PID 1's, or
// one opened for a verified member of the pod's cgroup.
TerminationEvents delete_pod(Container& container, const TerminationPlan& plan,
                             Clock::time_point t0,
                             const std::function<sys::Result<Spawned>()>& start_prestop);

}  // namespace gpureap::lab
