// gpureap check: a node-problem-detector custom plugin. Exit 0 OK, 1 problem,
// 2 unknown; one stdout line of at most 80 bytes naming the worst root cause;
// done within --deadline (NPD's default timeout is 5 s) even when the driver
// or a /proc read hangs; run directly, no shell.
#include <fmt/format.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "container/pod_resolver.hpp"
#include "findings/finding.hpp"
#include "gpu/activity.hpp"
#include "gpu/backend.hpp"
#include "gpu/nvml_backend.hpp"
#include "node/take.hpp"
#include "proc/kernel_fds.hpp"
#include "report/report.hpp"
#include "sys/host_root.hpp"

namespace gpureap::cli {

namespace {

struct CheckOptions {
  CommonOptions common;
  double deadline_s = 4.5;
  double nvml_timeout_s = 3;
};

struct Verdict {
  int exit_code = kExitCouldNotCheck;
  std::string line;
  bool driver_hung = false;  // a thread is stuck in the driver's library
};

Verdict unknown(const std::string& why) { return {kExitCouldNotCheck, report::fit_line("UNKNOWN: " + why)}; }

Verdict check_node(const CheckOptions& o) {
  auto root = sys::HostRoot::open(sys::HostRoot::resolve_path(o.common.host_root));
  if (!root) return unknown(root.error().message);
  std::unique_ptr<gpu::GpuBackend> backend;
  if (o.common.gpu == "auto" || o.common.gpu == "nvml") {
    gpu::NvmlOptions nvml;
    nvml.call_timeout = std::chrono::milliseconds(static_cast<long long>(o.nvml_timeout_s * 1000));
    backend = gpu::make_nvml_backend(*root, nvml);
  } else {
    auto made = gpu::make_backend(o.common.gpu, *root);
    if (!made) return unknown(made.error().message);
    backend = std::move(*made);
  }
  const auto resolvers = container::default_resolvers(*root, container::ResolverOptions{});
  node::SnapshotOptions snap_options;
  snap_options.threads = effective_threads(o.common);
  snap_options.fd_source = fd_source(o.common);
  snap_options.env_keys = findings::nccl_env_keys();
  proc::KernelPrograms pinned;  // with --bpf-pin-dir: taken from and left in that directory
  pinned.pin_dir = o.common.bpf_pin_dir;
  if (!pinned.pin_dir.empty()) snap_options.kernel_programs = &pinned;
  auto snap = node::take_snapshot(*root, *backend, resolvers, snap_options);
  if (!snap) {
    Verdict v = unknown(snap.error().message);
    v.driver_hung = backend->hung();
    return v;
  }
  if (snap->records.empty()) return unknown("no process could be read under " + snap->host_root + "/proc");
  const auto found = findings::detect_all(*snap);
  if (!findings::fails_check(found) && !unprivileged_scan(snap->scan_stats).empty()) {
    return unknown(std::to_string(snap->scan_stats.fds_denied) + " processes' descriptors unreadable (privilege)");
  }
  return {findings::fails_check(found) ? kExitFindings : kExitClean, report::render_check_line(*snap, found)};
}

// What the checking thread and the waiting one share; the thread may outlive
// the wait (stuck in the driver), so it holds its own reference.
struct Shared {
  std::mutex mutex;
  std::condition_variable done;
  std::optional<Verdict> verdict;
};

int run_check(const CheckOptions& o) {
  if (!(o.deadline_s > 0) || !(o.nvml_timeout_s > 0)) {
    fmt::print("{}\n", report::fit_line("UNKNOWN: --deadline and --nvml-timeout must be above 0"));
    return kExitCouldNotCheck;
  }
  auto shared = std::make_shared<Shared>();
  std::thread([shared, o] {
    Verdict v = check_node(o);
    std::lock_guard lock(shared->mutex);
    shared->verdict = std::move(v);
    shared->done.notify_all();
  }).detach();
  std::unique_lock lock(shared->mutex);
  const bool finished = shared->done.wait_for(lock, std::chrono::milliseconds(static_cast<long long>(o.deadline_s * 1000)),
                                              [&shared] { return shared->verdict.has_value(); });
  const Verdict v = finished ? *shared->verdict
                             : unknown(fmt::format("no answer within {:.1f} s (a hung driver or /proc read)", o.deadline_s));
  lock.unlock();
  fmt::print("{}\n", v.line);
  std::fflush(stdout);
  // A check still running, or a driver call that never returned: exit-time
  // destructors could wait on the stuck thread forever.
  if (!finished || v.driver_hung) std::_Exit(v.exit_code);
  return v.exit_code;
}

}  // namespace

void register_check(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<CheckOptions>();
  CLI::App* cmd = app.add_subcommand(
      "check", "node-problem-detector plugin: exit 0 OK, 1 problem, 2 unknown; one line of at most 80 bytes");
  cmd->add_option("--host-root", opt->common.host_root, "Host filesystem root (env GPUREAP_HOST_ROOT; default /)");
  cmd->add_option("--gpu", opt->common.gpu, "GPU backend: auto|nvml|sim|json:FILE|none")->capture_default_str();
  cmd->add_option("--threads", opt->common.threads, "Process-scan threads (0 = one per core, max 8)")
      ->capture_default_str();
  cmd->add_option("--fd-source", opt->common.fd_source, "auto, bpf or procfs")
      ->check(CLI::IsMember({"auto", "bpf", "procfs"}))
      ->capture_default_str();
  add_bpf_pin_option(*cmd, opt->common);
  cmd->add_option("--deadline", opt->deadline_s, "Seconds to answer within, whatever hangs (NPD's timeout is 5 s)")
      ->capture_default_str();
  cmd->add_option("--nvml-timeout", opt->nvml_timeout_s, "Seconds an NVML call may take")->capture_default_str();
  cmd->callback([opt, &run] { run = [opt] { return run_check(*opt); }; });
}

}  // namespace gpureap::cli
