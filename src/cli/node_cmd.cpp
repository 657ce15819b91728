// gpureap node: the GPU summary of this node (the plan's node-observe.sh), and
// gpureap snapshot: the GPU snapshot JSON of the live node (bug reports, replay
// with --gpu json:FILE).
#include <fmt/format.h>

#include <cstdio>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "cli/session.hpp"
#include "findings/finding.hpp"
#include "gpu/backend.hpp"
#include "gpu/snapshot_json.hpp"
#include "report/report.hpp"
#include "sys/host_root.hpp"

namespace gpureap::cli {

namespace {

int run_node(const CommonOptions& opt) {
  auto snap = take_node_snapshot(opt);
  if (!snap) {
    log_error(snap.error().message);
    return kExitCouldNotCheck;
  }
  const auto found = findings::detect_all(*snap);
  if (opt.json) {
    if (!report::write_trace_json(stdout, *snap, found)) {
      log_error("cannot write to stdout");
      return kExitCouldNotCheck;
    }
  } else {
    if (!report::write_text(stdout, report::render_node_report(*snap, found))) {
      log_error("cannot write to stdout");
      return kExitCouldNotCheck;
    }
  }
  return findings::fails_check(found) ? kExitFindings : kExitClean;
}

int run_snapshot(const CommonOptions& opt, const std::string& output) {
  auto root = sys::HostRoot::open(sys::HostRoot::resolve_path(opt.host_root));
  if (!root) {
    log_error(root.error().message);
    return kExitCouldNotCheck;
  }
  auto backend = gpu::make_backend(opt.gpu, *root);
  if (!backend) {
    log_error(backend.error().message);
    return kExitCouldNotCheck;
  }
  if (auto reason = (*backend)->unavailable_reason(); !reason.empty()) log_note(reason);
  auto snap = (*backend)->snapshot();
  if (!snap) {
    log_error(snap.error().message);
    return kExitCouldNotCheck;
  }
  const std::string text = report::json_text(gpu::snapshot_to_json(*snap)) + "\n";
  if (output.empty() || output == "-") {
    if (!report::write_text(stdout, text)) {
      log_error("cannot write to stdout");
      return kExitCouldNotCheck;
    }
    return kExitClean;
  }
  std::FILE* f = std::fopen(output.c_str(), "w");
  const bool written = f != nullptr && report::write_text(f, text);
  if (f == nullptr || std::fclose(f) != 0 || !written) {
    log_error("cannot write " + output);
    return kExitCouldNotCheck;
  }
  log_note("wrote " + output);
  return kExitClean;
}

}  // namespace

void register_node(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<CommonOptions>();
  CLI::App* cmd = app.add_subcommand("node", "GPU summary of this node: devices, driver-listed "
                                             "processes, unlisted holders, ghost memory");
  add_common_options(*cmd, *opt);
  add_bpf_pin_option(*cmd, *opt);
  cmd->callback([opt, &run] { run = [opt] { return run_node(*opt); }; });
}

void register_snapshot(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<CommonOptions>();
  auto output = std::make_shared<std::string>();
  CLI::App* cmd = app.add_subcommand(
      "snapshot", "Write the GPU snapshot JSON of this node (replay it with --gpu json:FILE)");
  cmd->add_option("--host-root", opt->host_root, "Host filesystem root (env GPUREAP_HOST_ROOT)");
  cmd->add_option("--gpu", opt->gpu, "GPU backend: auto|nvml|sim|json:FILE|none")->capture_default_str();
  cmd->add_option("-o,--output", *output, "File to write (default: stdout)");
  cmd->callback([opt, output, &run] { run = [opt, output] { return run_snapshot(*opt, *output); }; });
}

}  // namespace gpureap::cli
