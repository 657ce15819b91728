// What one scan leaves for the scrapes: a compact, immutable view built from
// the node snapshot and its findings (pure), so the snapshot itself is freed
// after each scan and memory stays flat. The metrics renderer reads only this.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"

namespace gpureap::exporter {

struct GpuView {
  unsigned index = 0;
  std::string uuid;
  std::string model;
  std::optional<std::uint64_t> used, reserved, total;
  std::uint64_t ghost_bytes = 0;
  bool utilization_sampled = false;
};

// Who a series names: the process and its pod (empty strings where unknown).
struct Subject {
  std::string pid;
  std::string comm;
  std::string pod;
  std::string pod_namespace;
  std::string container;
};

struct ProcessView {
  unsigned gpu = 0;
  Subject who;
  bool listed = false;
  std::uint64_t memory = 0;
  std::optional<double> sm_ratio;  // mean over the window; nullopt: not sampled
  std::optional<double> idle_s;
};

struct FindingView {
  findings::Kind kind = findings::Kind::zombie;
  findings::Severity severity = findings::Severity::warning;
  std::optional<unsigned> gpu;
  Subject who;
};

struct ScanCounts {
  unsigned vanished = 0, denied = 0, malformed = 0;
  unsigned fds_denied = 0;  // processes read whose descriptors were not (ScanStats::fds_denied)
};

struct View {
  std::string gpu_backend;
  std::vector<GpuView> gpus;
  std::vector<ProcessView> processes;  // largest memory first, at most max_process_series
  unsigned processes_dropped = 0;
  std::map<std::pair<findings::Kind, findings::Severity>, unsigned> finding_counts;
  std::vector<FindingView> findings;   // root causes, at most max_finding_series
  std::vector<std::pair<Subject, unsigned>> nccl_missing;  // per pod: missing local ranks
  ScanCounts skipped;
  double scan_seconds = 0;
  double finished_at = 0;              // seconds since the epoch
  std::string snapshot_json;           // /snapshot's body; empty when the endpoint is off
};

struct ViewOptions {
  std::size_t max_process_series = 256;
  std::size_t max_finding_series = 256;
};

// Pure: the view of one scan.
View build_view(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found,
                const ViewOptions& options);

// Replaces every process's arguments after argv[0] with one "<redacted>", so
// /snapshot never carries a command line unless allowed.
void redact_arguments(node::NodeSnapshot& snap);

}  // namespace gpureap::exporter
