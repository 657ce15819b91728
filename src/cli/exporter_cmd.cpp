// gpureap exporter: the node daemon for Prometheus (docs/exporter.md). Runs
// until SIGTERM or SIGINT, taken synchronously (sigwaitinfo on the main
// thread, blocked in every other), then stops serving and scanning.
#include <malloc.h>
#include <signal.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <memory>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "exporter/exporter.hpp"
#include "findings/finding.hpp"
#include "gpu/backend.hpp"
#include "gpu/nvml_backend.hpp"
#include "sys/host_root.hpp"

namespace gpureap::cli {

namespace {

struct ExporterCliOptions {
  CommonOptions common;
  std::string listen = ":9464";
  double interval_s = 15;
  double sample_period_s = 2;
  std::string web_config;
  bool enable_snapshot = false;
  bool snapshot_arguments = false;
  double idle_minutes = 10;
  std::uint64_t idle_min_mib = 512;
  double spin_sm_percent = 90;
  double spin_minutes = 1;
  std::size_t max_process_series = 256;
  std::size_t max_finding_series = 256;
  double nvml_timeout_s = 5;
  std::uint64_t ghost_threshold_mib = 128;
};

std::chrono::milliseconds ms(double s) { return std::chrono::milliseconds(static_cast<long long>(s * 1000)); }

int run_exporter(const ExporterCliOptions& o) {
  if (!(o.interval_s > 0) || !(o.sample_period_s > 0) || !(o.nvml_timeout_s > 0)) {
    log_error("exporter: --interval, --sample-period and --nvml-timeout must be above 0");
    return kExitCouldNotCheck;
  }
  exporter::ExporterConfig config;
  config.listen = o.listen;
  config.interval = ms(o.interval_s);
  config.sample_period = ms(o.sample_period_s);
  config.enable_snapshot = o.enable_snapshot;
  config.snapshot_arguments = o.snapshot_arguments;
  config.view.max_process_series = o.max_process_series;
  config.view.max_finding_series = o.max_finding_series;
  config.detect.idle_seconds = o.idle_minutes * 60;
  config.detect.idle_min_bytes = o.idle_min_mib << 20;
  config.detect.spin_sm_percent = o.spin_sm_percent;
  config.detect.spin_seconds = o.spin_minutes * 60;
  config.detect.ghost_threshold_bytes = o.ghost_threshold_mib << 20;
  config.snapshot.threads = effective_threads(o.common);
  config.snapshot.fd_source = fd_source(o.common);
  config.snapshot.env_keys = findings::nccl_env_keys();
  config.version = "0.1.0";
  if (!o.web_config.empty()) {
    auto web = exporter::load_web_config(o.web_config);
    if (!web) {
      log_error("exporter: --web-config: " + web.error().message);
      return kExitCouldNotCheck;
    }
    config.web = std::move(*web);
  }
  auto root = sys::HostRoot::open(sys::HostRoot::resolve_path(o.common.host_root));
  if (!root) {
    log_error(root.error().message);
    return kExitCouldNotCheck;
  }
  // A daemon of several threads (scan, sampler, HTTP): glibc's arena per
  // thread kept each scan's freed snapshot resident, 20 MiB against 12.5 MiB
  // with two arenas and a low trim threshold (bench/exporter, 2,000 processes).
  ::mallopt(M_ARENA_MAX, 2);
  ::mallopt(M_TRIM_THRESHOLD, 128 * 1024);
  // Block the stop signals before any thread starts, so all inherit the mask
  // and only sigwaitinfo below takes them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  std::unique_ptr<gpu::GpuBackend> backend;
  if (o.common.gpu == "auto" || o.common.gpu == "nvml") {
    gpu::NvmlOptions nvml;
    nvml.call_timeout = ms(o.nvml_timeout_s);
    backend = gpu::make_nvml_backend(*root, nvml);
  } else {
    auto made = gpu::make_backend(o.common.gpu, *root);
    if (!made) {
      log_error(made.error().message);
      return kExitCouldNotCheck;
    }
    backend = std::move(*made);
  }
  if (auto reason = backend->unavailable_reason(); !reason.empty()) log_note(reason);
  auto running = exporter::Exporter::start(std::move(config), std::move(*root), std::move(backend),
                                           [](const std::string& line) { log_note("exporter: " + line); });
  if (!running) {
    log_error("exporter: " + running.error().message);
    return kExitCouldNotCheck;
  }
  std::string ports;
  for (int p : (*running)->ports()) ports += fmt::format("{}{}", ports.empty() ? "" : ",", p);
  // The ready line: tests and operators wait for it, never for a delay.
  fmt::print("gpureap exporter: listening on port {} ({})\n", ports, o.listen);
  (void)std::fflush(stdout);
  int taken = 0;
  do {
    taken = sigwaitinfo(&stop_signals, nullptr);
  } while (taken < 0);
  log_note(fmt::format("exporter: signal {} received, stopping", taken));
  if (!(*running)->stop()) {
    // A thread is stuck in the driver: exit-time destructors could wait on it forever.
    log_note("exporter: a driver call never returned; exiting without cleanup");
    (void)std::fflush(nullptr);
    std::_Exit(kExitClean);
  }
  return kExitClean;
}

}  // namespace

void register_exporter(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<ExporterCliOptions>();
  CLI::App* cmd = app.add_subcommand(
      "exporter", "Prometheus exporter: scan the node every --interval, serve /metrics, /healthz (and /snapshot)");
  cmd->add_option("--host-root", opt->common.host_root, "Host filesystem root (env GPUREAP_HOST_ROOT; default /)");
  cmd->add_option("--gpu", opt->common.gpu, "GPU backend: auto|nvml|sim|json:FILE|none")->capture_default_str();
  cmd->add_option("--threads", opt->common.threads, "Process-scan threads (0 = one per core, max 8)")
      ->capture_default_str();
  cmd->add_option("--fd-source", opt->common.fd_source, "Where open descriptors are read: auto, bpf, procfs")
      ->check(CLI::IsMember({"auto", "bpf", "procfs"}))
      ->capture_default_str();
  cmd->add_option("--listen", opt->listen, "[HOST]:PORT to serve on")->capture_default_str();
  cmd->add_option("--interval", opt->interval_s, "Seconds between scans")->capture_default_str();
  cmd->add_option("--sample-period", opt->sample_period_s, "Seconds between per-process utilization readings")
      ->capture_default_str();
  cmd->add_option("--web-config", opt->web_config,
                  "TLS and basic auth, in the Prometheus exporter toolkit's web config format");
  cmd->add_flag("--enable-snapshot", opt->enable_snapshot,
                "Serve /snapshot: the trace JSON of the last scan (command-line arguments redacted)");
  cmd->add_flag("--snapshot-arguments", opt->snapshot_arguments,
                "With --enable-snapshot: keep command-line arguments (they may carry secrets)");
  cmd->add_option("--idle-minutes", opt->idle_minutes, "idle_holder: minutes at 0 % SM")->capture_default_str();
  cmd->add_option("--idle-min-mib", opt->idle_min_mib, "idle_holder: at least this much GPU memory held")
      ->capture_default_str();
  cmd->add_option("--spin-sm-percent", opt->spin_sm_percent, "nccl_spin: survivors' mean SM utilization at least")
      ->capture_default_str();
  cmd->add_option("--spin-minutes", opt->spin_minutes, "nccl_spin: seen spinning for at least")
      ->capture_default_str();
  cmd->add_option("--max-process-series", opt->max_process_series,
                  "Per-process series kept (the largest holders); the rest are counted as dropped")
      ->capture_default_str();
  cmd->add_option("--max-finding-series", opt->max_finding_series, "gpureap_finding_info series kept")
      ->capture_default_str();
  cmd->add_option("--nvml-timeout", opt->nvml_timeout_s,
                  "Seconds an NVML call may take before the driver is taken as hung (data goes stale, /healthz 503)")
      ->capture_default_str();
  cmd->add_option("--ghost-threshold-mib", opt->ghost_threshold_mib, "Unexplained used memory that counts as ghost")
      ->capture_default_str();
  cmd->callback([opt, &run] { run = [opt] { return run_exporter(*opt); }; });
}

}  // namespace gpureap::cli
