// What one scenario run measured, and the pure derivations from it: the
// release time and GiB·s from the sampled series, how the memory came back,
// and the JSON of DIR/<scenario>/measurements.json (docs/lab.md).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "lab/kubelet.hpp"
#include "lab/sampler.hpp"

namespace gpureap::lab {

// A finding of `gpureap trace` (node side) or `gpureap observe` (inside) that
// belongs to this scenario.
struct SeenFinding {
  std::string kind;
  std::string severity;
  std::optional<pid_t> pid;
  std::optional<unsigned> gpu;
  std::vector<pid_t> holders;  // orphaned_context: the processes holding the context
  std::string message;
  bool related = false;  // grouped by trace under the finding before it (same root cause)
};

struct StepReport {
  std::string step;  // "after-spawn", "after-kill", "after-delete"
  double t = 0;      // seconds since the scenario started
  std::uint64_t gpu_bytes = 0;
  // observe, inside the container (none after the deletion)
  std::optional<int> observe_exit;
  std::string pid1;  // PID 1's command line as observe saw it
  bool pid1_is_init = false;
  std::vector<pid_t> zombies;  // container-local PIDs
  std::vector<pid_t> orphans;  // adopted by PID 1 (observe's evidence)
  unsigned listed_dead = 0;    // driver listings judged dead from inside
  std::vector<SeenFinding> observe_findings;
  // trace, on the node
  std::optional<int> trace_exit;
  bool pod_named = false;  // trace named this pod for its GPU processes
  std::vector<SeenFinding> trace_findings;
  std::string error;  // a tool that could not run
};

struct Measurements {
  std::string scenario;  // "S1"
  std::string instance;  // "S1-w10"
  std::string title;
  std::string label;  // a few words, with the variant
  unsigned workers = 1;
  unsigned uid = 0;
  std::string runtime;
  std::string workload;
  std::string gpu_backend;  // "sim" or "nvml"
  std::string driver_version;
  std::string gpu_name;
  unsigned gpu_index = 0;
  bool quick = false;
  double time_scale = 1;
  std::string pod;
  std::string pid1;  // "bash", "tini", "gpureap-init"
  std::vector<std::string> pid1_command;
  double grace_s = 0;  // as run (scaled)
  std::optional<double> prestop_term_wait_s;
  std::optional<double> init_gpu_grace_s;
  std::optional<double> plan_expected_hold_s;  // the plan's README (scaled as the run)

  unsigned zombies = 0;            // distinct zombies observe saw inside
  unsigned orphans = 0;            // distinct PPID-1 processes observe saw inside
  unsigned orphaned_contexts = 0;  // orphaned_context findings of trace on the node
  unsigned hidden_holders =
      0;  // processes trace called hidden holders (GPU descriptors, not listed)
  unsigned latent_orphaned_contexts =
      0;  // contexts a live creator's forked children share (trace's warning)
  std::vector<pid_t> orphaned_context_holders;  // host PIDs trace named
  std::vector<pid_t> forked_children;           // host PIDs of the creator's forked children (S6)
  bool term_reached_worker = false;
  std::optional<double> term_reached_worker_s;  // since the deletion started
  std::uint64_t gpu_bytes_at_delete = 0;
  std::optional<double> gpu_release_after_delete_s;
  double gpu_gib_seconds_during_termination = 0;
  unsigned survivors_after_delete = 0;
  std::uint64_t gpu_bytes_after_delete = 0;
  bool init_escalated = false;  // gpureap-init logged a SIGKILL escalation
  TerminationEvents deletion;
  std::string release_cause;
  std::vector<StepReport> steps;
  std::vector<Sample> timeline;
  double sample_period_s = 0.01;
  std::optional<std::string> not_run;  // why it did not run (S7 without two GPUs)
  std::optional<std::string> error;    // the lab could not run it
};

// The first sample of the last run of zero-byte samples: when the memory came
// back for good; nullopt when the series ends held (or is empty).
std::optional<double> release_time(const std::vector<Sample>& series);

// ∫ memory dt from the deletion's start to the release (or the series' end),
// each sample's value held until the next (the first from t = 0), in GiB·s.
double gib_seconds(const std::vector<Sample>& series, std::optional<double> until);

// How the memory came back, in words, from the deletion's events (pure).
std::string release_cause(const Measurements& m);

nlohmann::json to_json(const Measurements& m);

inline constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

}  // namespace gpureap::lab
