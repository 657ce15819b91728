// gpureap exporter's runtime: one background scan per interval into a cached
// view, utilization sampled between scans, and an HTTP server (civetweb, the
// server prometheus-cpp's Exposer wraps) whose /metrics renders the cached view
// through a prometheus-cpp collector at scrape time. A scan never blocks a
// scrape: scrapes read an immutable view swapped in under a mutex held only
// for the swap. Printing stays in src/cli (a log callback).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "container/pod_resolver.hpp"
#include "exporter/view.hpp"
#include "exporter/web_config.hpp"
#include "findings/finding.hpp"
#include "gpu/backend.hpp"
#include "node/take.hpp"
#include "sys/error.hpp"
#include "sys/host_root.hpp"

namespace gpureap::exporter {

struct ExporterConfig {
  std::string listen = ":9464";
  std::chrono::milliseconds interval{15000};
  std::chrono::milliseconds sample_period{2000};
  WebConfig web;
  bool enable_snapshot = false;     // /snapshot: the trace JSON of the last scan
  bool snapshot_arguments = false;  // ... with command-line arguments (else redacted)
  ViewOptions view;
  findings::DetectOptions detect;
  node::SnapshotOptions snapshot;
  unsigned http_threads = 4;
  std::string version;
};

// One line for the operator (scan failures, recoveries); the CLI prints it.
using Log = std::function<void(const std::string&)>;

class Exporter {
 public:
  // Starts the server and the scan loop (the first scan at once). Fails when
  // the address cannot be bound or the TLS files cannot be read.
  static sys::Result<std::unique_ptr<Exporter>> start(ExporterConfig config, sys::HostRoot root,
                                                      std::unique_ptr<gpu::GpuBackend> backend, Log log);
  ~Exporter();
  Exporter(const Exporter&) = delete;
  Exporter& operator=(const Exporter&) = delete;

  // The ports listened on (the real ones when the address said port 0).
  [[nodiscard]] std::vector<int> ports() const;
  // Stops serving and scanning; a scan stuck in the driver is left behind.
  // True when nothing was: false means the process must end with _Exit.
  bool stop();

  struct Impl;

 private:
  explicit Exporter(std::shared_ptr<Impl> impl);
  std::shared_ptr<Impl> impl_;
};

}  // namespace gpureap::exporter
