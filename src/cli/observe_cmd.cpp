// gpureap observe: the originating plan's in-container check (observe.sh), run
// inside a container: PID 1, the process tree, zombies, orphans, GPU memory, the
// driver's processes, descriptor holders, and an orphaned-context summary that
// never calls a live worker orphaned because the driver spoke in host PIDs.
// Exit 0 clean, 1 findings, 2 could not check.
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/session.hpp"
#include "findings/finding.hpp"
#include "observe/observe.hpp"
#include "report/report.hpp"

namespace gpureap::cli {

namespace {

int run_observe(const CommonOptions& opt) {
  auto snap = take_node_snapshot(opt);
  if (!snap) {
    log_error(snap.error().message);
    return kExitCouldNotCheck;
  }
  if (snap->records.empty()) {
    log_error("no process could be read under " + snap->host_root + "/proc");
    return kExitCouldNotCheck;
  }
  const auto found = findings::detect_all(*snap);
  const auto rep = observe::analyse_observe(*snap, found);
  if (opt.json) {
    fmt::print("{}\n", report::json_text(observe::observe_json(*snap, rep)));
  } else {
    fmt::print("{}", observe::render_observe(*snap, rep));
  }
  std::fflush(stdout);
  return rep.fails_check() ? kExitFindings : kExitClean;
}

}  // namespace

void register_observe(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<CommonOptions>();
  CLI::App* cmd = app.add_subcommand(
      "observe",
      "In-container check: PID 1, process tree, zombies, orphans, GPU memory, driver-listed "
      "processes, descriptor holders, orphaned contexts (never confused by host PIDs)");
  add_common_options(*cmd, *opt);
  add_bpf_pin_option(*cmd, *opt);
  cmd->callback([opt, &run] { run = [opt] { return run_observe(*opt); }; });
}

}  // namespace gpureap::cli
