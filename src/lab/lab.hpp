// gpureap lab: the originating plan's whole experiment, run on this machine.
// Every scenario (src/lab/scenario.hpp) gets a pod of its own; the lab plays
// the operator (exec the parent, observe, trace, kill -9, exec again) and the
// kubelet (delete the pod), samples the GPU every 10 ms during the deletion and
// writes DIR/<scenario>/ (logs, notes.md, measurements.json), DIR/comparison.md
// and DIR/timeline.svg. docs/lab.md is the user's page.
#pragma once

#include <cstdio>
#include <string>
#include <vector>

#include "lab/measurements.hpp"

namespace gpureap::lab {

struct LabOptions {
  bool quick = false;  // every grace and wait × 0.1 (order and ratios kept)
  std::string out_dir = "results/lab";
  std::string scenarios;     // "S1,S4,S1-w10"; empty: every scenario and the plan's S1 variants
  std::string gpu = "auto";  // auto (NVML where a driver answers, else sim) | nvml | sim
  std::string runtime = "builtin";  // builtin | runc
  std::string workload = "cpp";     // cpp | torch
  unsigned workers = 1;             // workers per parent (the plan's variant: 10)
  unsigned uid = 0;                 // the workers' user (the plan's variant: 1000)
  bool serial = false;              // one scenario at a time
};

inline constexpr int kLabExitOk = 0;           // every scenario ran, whatever it found
inline constexpr int kLabExitCouldNotRun = 2;  // the lab itself could not run one (or a bad option)

// Runs the lab: progress lines on `progress` (stderr), the comparison table
// and where the results are on `out` (stdout). Returns the exit code.
int run_lab(const LabOptions& options, std::FILE* out, std::FILE* progress);

// The comparison of a run (DIR/comparison.md), pure. `when` says when and
// where it was measured (a line under the title; empty: none).
std::string comparison_markdown(const std::vector<Measurements>& runs,
                                const std::string& when = {});
// One scenario's notes (DIR/<scenario>/notes.md), pure.
std::string notes_markdown(const Measurements& m);
// GPU memory against time during the deletion, one panel per scenario on a
// shared time axis (DIR/timeline.svg), pure.
std::string timeline_svg(const std::vector<Measurements>& runs);

}  // namespace gpureap::lab
