// gpureap trace: every GPU-holding process on the node, mapped to its pod,
// with what is wrong. Exit 0 clean, 1 findings, 2 could not check.
#include "cli/commands.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/common.hpp"
#include "cli/session.hpp"
#include "findings/finding.hpp"
#include "report/report.hpp"

namespace gpureap::cli {

namespace {

struct TraceOptions {
  CommonOptions common;
  std::uint64_t ghost_threshold_mib = 128;
  std::uint64_t v1_reserved_allowance_mib = 1024;
  double sample_s = 0;
  double sample_period_s = 1;
  double idle_minutes = 10;
  std::uint64_t idle_min_mib = 512;
  double spin_sm_percent = 90;
  double spin_minutes = 1;
};

int run_trace(const TraceOptions& opt) {
  auto snap = take_node_snapshot(opt.common, opt.sample_s, opt.sample_period_s);
  if (!snap) {
    log_error(snap.error().message);
    return kExitCouldNotCheck;
  }
  findings::DetectOptions detect;
  detect.ghost_threshold_bytes = opt.ghost_threshold_mib << 20;
  detect.v1_reserved_allowance_bytes = opt.v1_reserved_allowance_mib << 20;
  detect.idle_seconds = opt.idle_minutes * 60;
  detect.idle_min_bytes = opt.idle_min_mib << 20;
  detect.spin_sm_percent = opt.spin_sm_percent;
  detect.spin_seconds = opt.spin_minutes * 60;
  const auto found = findings::detect_all(*snap, detect);
  const bool written = opt.common.json ? report::write_trace_json(stdout, *snap, found)
                                       : report::write_trace_table(stdout, *snap, found);
  if (!written) {
    log_error("cannot write to stdout");
    return kExitCouldNotCheck;
  }
  // Every minute on every node: the snapshot's teardown is not worth waiting for.
  if (findings::fails_check(found)) return exit_without_teardown(kExitFindings);
  // A clean answer from a scan blind to other users' descriptors is no answer.
  if (const auto why = unprivileged_scan(snap->scan_stats); !why.empty()) {
    log_error(why);
    return kExitCouldNotCheck;
  }
  return exit_without_teardown(kExitClean);
}

}  // namespace

void register_trace(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<TraceOptions>();
  CLI::App* cmd = app.add_subcommand(
      "trace", "Every GPU-holding process on the node, mapped to its pod, with what is wrong");
  add_common_options(*cmd, opt->common);
  add_bpf_pin_option(*cmd, opt->common);
  cmd->add_option("--ghost-threshold-mib", opt->ghost_threshold_mib,
                  "Used GPU memory no listed process explains that counts as ghost memory")
      ->capture_default_str();
  cmd->add_option("--v1-reserved-allowance-mib", opt->v1_reserved_allowance_mib,
                  "On drivers with v1 memory accounting only (used includes reserved memory), "
                  "how much more must be unexplained before it counts as ghost memory")
      ->capture_default_str();
  cmd->add_option("--sample", opt->sample_s,
                  "Sample per-process GPU utilization for this many seconds before judging (idle_holder, "
                  "nccl_spin); 0: no sampling")
      ->capture_default_str();
  cmd->add_option("--sample-period", opt->sample_period_s, "Seconds between utilization readings while sampling")
      ->capture_default_str();
  cmd->add_option("--idle-minutes", opt->idle_minutes, "idle_holder: minutes at 0 % SM (at most --sample)")
      ->capture_default_str();
  cmd->add_option("--idle-min-mib", opt->idle_min_mib, "idle_holder: at least this much GPU memory held")
      ->capture_default_str();
  cmd->add_option("--spin-sm-percent", opt->spin_sm_percent, "nccl_spin: survivors' mean SM utilization at least")
      ->capture_default_str();
  cmd->add_option("--spin-minutes", opt->spin_minutes, "nccl_spin: seen spinning for at least (at most --sample)")
      ->capture_default_str();
  cmd->callback([opt, &run] { run = [opt] { return run_trace(*opt); }; });
}

}  // namespace gpureap::cli
