// Every series the exporter publishes, declared once as data: the name, the
// type, the unit, what it measures and its labels. HELP is generated from
// this table (what + unit) and docs/exporter.md's table lists the same rows;
// tests hold the names to Prometheus's conventions (base units as suffixes,
// counters ending in _total, snake_case labels).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace gpureap::exporter {

enum class SeriesType { gauge, counter };
enum class Unit { none, bytes, seconds, ratio, info };

// Index into kSeries: the renderer fills series by id, never by a repeated name.
enum class SeriesId : std::size_t {
  build_info,
  gpu_memory_used,
  gpu_memory_reserved,
  gpu_memory_total,
  gpu_process_memory,
  gpu_process_sm_utilization,
  gpu_process_idle,
  gpu_process_series_dropped,
  findings,
  finding_info,
  ghost_memory,
  nccl_missing_ranks,
  utilization_supported,
  scans,
  scan_errors,
  scan_duration,
  last_success,
  scan_stale,
  scan_skipped_entries,
  scan_unreadable_fd_tables,
};

struct SeriesSpec {
  SeriesId id;
  std::string_view name;
  SeriesType type;
  Unit unit;
  std::string_view what;  // HELP's first part: what the value measures
  std::span<const std::string_view> labels;
};

inline constexpr std::string_view kBuildLabels[] = {"version", "gpu_backend"};
inline constexpr std::string_view kGpuLabels[] = {"gpu", "uuid", "model"};
// Per process: bounded by --max-process-series (docs/exporter.md: cardinality).
inline constexpr std::string_view kProcessLabels[] = {"gpu", "uuid", "pid", "comm", "pod", "namespace", "container",
                                                      "listed"};
inline constexpr std::string_view kKindLabels[] = {"kind", "severity"};
inline constexpr std::string_view kFindingLabels[] = {"kind", "severity", "gpu", "pid", "pod", "namespace",
                                                      "container"};
inline constexpr std::string_view kGhostLabels[] = {"gpu", "uuid"};
inline constexpr std::string_view kPodLabels[] = {"pod", "namespace"};
inline constexpr std::string_view kSkippedLabels[] = {"reason"};
inline constexpr std::span<const std::string_view> kNoLabels{};

inline constexpr SeriesSpec kSeries[] = {
    {SeriesId::build_info, "gpureap_build_info", SeriesType::gauge, Unit::info,
     "gpureap's version and the GPU backend in use", kBuildLabels},
    {SeriesId::gpu_memory_used, "gpureap_gpu_memory_used_bytes", SeriesType::gauge, Unit::bytes,
     "GPU memory in use by v2 accounting (reserved memory excluded; v1 drivers include it)", kGpuLabels},
    {SeriesId::gpu_memory_reserved, "gpureap_gpu_memory_reserved_bytes", SeriesType::gauge, Unit::bytes,
     "GPU memory the driver reserves for itself (absent on v1-only drivers)", kGpuLabels},
    {SeriesId::gpu_memory_total, "gpureap_gpu_memory_total_bytes", SeriesType::gauge, Unit::bytes,
     "GPU memory in total", kGpuLabels},
    {SeriesId::gpu_process_memory, "gpureap_gpu_process_memory_bytes", SeriesType::gauge, Unit::bytes,
     "GPU memory the driver attributes to a process (listed=\"false\": holds GPU descriptors, not listed; "
     "a gone creator's listing carries the pod of the processes holding its context)",
     kProcessLabels},
    {SeriesId::gpu_process_sm_utilization, "gpureap_gpu_process_sm_utilization_ratio", SeriesType::gauge,
     Unit::ratio, "mean SM utilization of a listed process over the sampling window (absent from the "
     "driver's answer = 0)", kProcessLabels},
    {SeriesId::gpu_process_idle, "gpureap_gpu_process_idle_seconds", SeriesType::gauge, Unit::seconds,
     "how long a listed process has run nothing on the GPU (0 % SM), within the sampling window",
     kProcessLabels},
    {SeriesId::gpu_process_series_dropped, "gpureap_gpu_process_series_dropped", SeriesType::gauge, Unit::none,
     "GPU processes left out of the per-process series by --max-process-series (the smallest holders)",
     kNoLabels},
    {SeriesId::findings, "gpureap_findings", SeriesType::gauge, Unit::none,
     "root causes found by the last scan, per finding kind and severity (grouped findings not counted again)",
     kKindLabels},
    {SeriesId::finding_info, "gpureap_finding_info", SeriesType::gauge, Unit::info,
     "one series per root cause found by the last scan, naming its pod (bounded by --max-finding-series)",
     kFindingLabels},
    {SeriesId::ghost_memory, "gpureap_ghost_memory_bytes", SeriesType::gauge, Unit::bytes,
     "used GPU memory no listed process explains, past the ghost-memory threshold (0: none)", kGhostLabels},
    {SeriesId::nccl_missing_ranks, "gpureap_nccl_missing_ranks", SeriesType::gauge, Unit::none,
     "local ranks missing from torch.distributed jobs whose survivors hold GPU memory", kPodLabels},
    {SeriesId::utilization_supported, "gpureap_gpu_utilization_sampled", SeriesType::gauge, Unit::none,
     "1 when per-process utilization is sampled on the GPU (0: MIG, an old GPU or driver, a failed reading)",
     kGpuLabels},
    {SeriesId::scans, "gpureap_scans_total", SeriesType::counter, Unit::none, "node scans attempted", kNoLabels},
    {SeriesId::scan_errors, "gpureap_scan_errors_total", SeriesType::counter, Unit::none,
     "node scans that failed (the last good result stays published, marked stale)", kNoLabels},
    {SeriesId::scan_duration, "gpureap_scan_duration_seconds", SeriesType::gauge, Unit::seconds,
     "wall time of the last successful scan", kNoLabels},
    {SeriesId::last_success, "gpureap_last_success_timestamp_seconds", SeriesType::gauge, Unit::seconds,
     "when the last successful scan finished, since the Unix epoch", kNoLabels},
    {SeriesId::scan_stale, "gpureap_scan_stale", SeriesType::gauge, Unit::none,
     "1 when the published data is older than three intervals (scans failing or hung; /healthz answers 503)",
     kNoLabels},
    {SeriesId::scan_skipped_entries, "gpureap_scan_skipped_entries", SeriesType::gauge, Unit::none,
     "/proc entries the last scan skipped: vanished, denied or malformed (normal in small numbers)",
     kSkippedLabels},
    {SeriesId::scan_unreadable_fd_tables, "gpureap_scan_unreadable_descriptor_tables", SeriesType::gauge,
     Unit::none,
     "processes whose descriptors the last scan could not read for lack of privilege: their GPU use is unknown "
     "(give the exporter CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH, or CAP_BPF and CAP_PERFMON)",
     kNoLabels},
};

[[nodiscard]] constexpr const SeriesSpec& spec(SeriesId id) { return kSeries[static_cast<std::size_t>(id)]; }

// The suffix a unit requires of a name ("_bytes"; none for `none`).
std::string_view unit_suffix(Unit unit);
// HELP text: what, then the unit in words.
std::string help_text(const SeriesSpec& spec);

}  // namespace gpureap::exporter
