// gpureap lab: the plan's whole experiment with one command. Exit 0 when every
// scenario ran (whatever it found), 2 when the lab could not run one.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "lab/lab.hpp"
#include "lab/scenario.hpp"

namespace gpureap::cli {

namespace {

struct LabCliOptions {
  lab::LabOptions lab;
  bool print_scenarios = false;
};

int run_lab_cmd(const LabCliOptions& opt) {
  if (opt.print_scenarios) {
    fmt::print("{}\n", lab::scenarios_json().dump(2));
    return 0;
  }
  return lab::run_lab(opt.lab, stdout, stderr);
}

}  // namespace

void register_lab(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<LabCliOptions>();
  CLI::App* cmd = app.add_subcommand("lab",
                                     "Run the plan's experiment: every scenario in a pod of its "
                                     "own (spawn, observe, trace, kill -9, delete "
                                     "as the kubelet does), GPU memory sampled every 10 ms; writes "
                                     "DIR/comparison.md, DIR/timeline.svg and "
                                     "DIR/<scenario>/");
  cmd->add_flag("--quick", opt->lab.quick,
                "Scale every grace and wait by 0.1 (order and ratios kept), for CI");
  cmd->add_option("--out", opt->lab.out_dir, "Output directory")->capture_default_str();
  cmd->add_option("--scenarios", opt->lab.scenarios,
                  "Comma-separated scenarios, S1 … S7, with variants S1-w10 (ten workers), "
                  "S1-uid1000 (non-root); "
                  "default: all, plus the plan's S1 variants");
  cmd->add_option("--gpu", opt->lab.gpu,
                  "auto (NVML where a driver answers, else the simulated GPU), nvml, sim")
      ->check(CLI::IsMember({"auto", "nvml", "sim"}))
      ->capture_default_str();
  cmd->add_option("--runtime", opt->lab.runtime,
                  "builtin (namespaces + cgroup) or runc (a real OCI container)")
      ->check(CLI::IsMember({"builtin", "runc"}))
      ->capture_default_str();
  cmd->add_option("--workload", opt->lab.workload,
                  "cpp (gpureap-worker: simulated GPU or CUDA's driver API) or torch (the plan's "
                  "Python programs)")
      ->check(CLI::IsMember({"cpp", "torch"}))
      ->capture_default_str();
  cmd->add_option("--workers", opt->lab.workers, "GPU workers per parent (the plan's variant: 10)")
      ->check(CLI::Range(1U, 64U))
      ->capture_default_str();
  cmd->add_option("--uid", opt->lab.uid, "User the workers run as (the plan's variant: 1000)")
      ->capture_default_str();
  cmd->add_flag("--serial", opt->lab.serial, "One scenario at a time (default: all at once)");
  cmd->add_flag(
      "--print-scenarios", opt->print_scenarios,
      "Print the scenario table as JSON (what deployment manifests are checked against) and exit");
  cmd->callback([opt, &run] { run = [opt] { return run_lab_cmd(*opt); }; });
}

}  // namespace gpureap::cli
