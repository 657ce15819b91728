#include "exporter/metrics.hpp"

#include <map>
#include <string_view>

#include "exporter/series.hpp"

namespace gpureap::exporter {

namespace {

using prometheus::ClientMetric;
using prometheus::MetricFamily;

// Collects samples per series id; one family each, in kSeries order. Two
// samples with the same labels are summed: a label set is one series.
class Families {
 public:
  void add(SeriesId id, std::vector<std::string> values, double value) {
    const SeriesSpec& s = spec(id);
    auto& series = samples_[static_cast<std::size_t>(id)];
    auto [it, inserted] = series.try_emplace(std::move(values), value);
    if (!inserted) it->second += value;
    (void)s;
  }
  // Declares a family even when it has no sample yet (counters, the finding counts).
  void touch(SeriesId id) { (void)samples_[static_cast<std::size_t>(id)]; }

  std::vector<MetricFamily> take() {
    std::vector<MetricFamily> out;
    for (const auto& s : kSeries) {
      auto it = samples_.find(static_cast<std::size_t>(s.id));
      if (it == samples_.end()) continue;
      MetricFamily f;
      f.name = std::string(s.name);
      f.help = help_text(s);
      f.type = s.type == SeriesType::counter ? prometheus::MetricType::Counter : prometheus::MetricType::Gauge;
      for (const auto& [values, value] : it->second) {
        ClientMetric m;
        for (std::size_t i = 0; i < s.labels.size() && i < values.size(); ++i) {
          m.label.push_back(ClientMetric::Label{std::string(s.labels[i]), values[i]});
        }
        if (s.type == SeriesType::counter) {
          m.counter.value = value;
        } else {
          m.gauge.value = value;
        }
        f.metric.push_back(std::move(m));
      }
      out.push_back(std::move(f));
    }
    return out;
  }

 private:
  std::map<std::size_t, std::map<std::vector<std::string>, double>> samples_;
};

std::vector<std::string> gpu_labels(const GpuView& g) { return {std::to_string(g.index), g.uuid, g.model}; }

const GpuView* gpu_of(const View& v, unsigned index) {
  for (const auto& g : v.gpus) {
    if (g.index == index) return &g;
  }
  return nullptr;
}

std::vector<std::string> process_labels(const View& v, const ProcessView& p) {
  const GpuView* g = gpu_of(v, p.gpu);
  return {std::to_string(p.gpu), g != nullptr ? g->uuid : std::string(), p.who.pid, p.who.comm, p.who.pod,
          p.who.pod_namespace, p.who.container, p.listed ? "true" : "false"};
}

}  // namespace

std::vector<MetricFamily> render_metrics(const View* view, const ScanHealth& health) {
  Families out;
  out.add(SeriesId::build_info, {health.version, view != nullptr ? view->gpu_backend : std::string()}, 1);
  out.add(SeriesId::scans, {}, static_cast<double>(health.scans));
  out.add(SeriesId::scan_errors, {}, static_cast<double>(health.errors));
  out.add(SeriesId::scan_stale, {}, health.stale ? 1 : 0);
  // Every kind and severity, zero included: an alert on a count needs the series to exist.
  for (findings::Kind k : findings::kAllKinds) {
    for (findings::Severity s : findings::kAllSeverities) {
      unsigned n = 0;
      if (view != nullptr) {
        auto it = view->finding_counts.find({k, s});
        if (it != view->finding_counts.end()) n = it->second;
      }
      out.add(SeriesId::findings, {std::string(findings::to_string(k)), std::string(findings::to_string(s))}, n);
    }
  }
  if (view == nullptr) return out.take();
  const View& v = *view;

  out.add(SeriesId::scan_duration, {}, v.scan_seconds);
  out.add(SeriesId::last_success, {}, v.finished_at);
  out.add(SeriesId::scan_skipped_entries, {"vanished"}, v.skipped.vanished);
  out.add(SeriesId::scan_skipped_entries, {"denied"}, v.skipped.denied);
  out.add(SeriesId::scan_skipped_entries, {"malformed"}, v.skipped.malformed);
  out.add(SeriesId::scan_unreadable_fd_tables, {}, v.skipped.fds_denied);
  for (const auto& g : v.gpus) {
    if (g.used) out.add(SeriesId::gpu_memory_used, gpu_labels(g), static_cast<double>(*g.used));
    if (g.reserved) out.add(SeriesId::gpu_memory_reserved, gpu_labels(g), static_cast<double>(*g.reserved));
    if (g.total) out.add(SeriesId::gpu_memory_total, gpu_labels(g), static_cast<double>(*g.total));
    out.add(SeriesId::ghost_memory, {std::to_string(g.index), g.uuid}, static_cast<double>(g.ghost_bytes));
    out.add(SeriesId::utilization_supported, gpu_labels(g), g.utilization_sampled ? 1 : 0);
  }
  for (const auto& p : v.processes) {
    auto labels = process_labels(v, p);
    out.add(SeriesId::gpu_process_memory, labels, static_cast<double>(p.memory));
    if (p.sm_ratio) out.add(SeriesId::gpu_process_sm_utilization, labels, *p.sm_ratio);
    if (p.idle_s) out.add(SeriesId::gpu_process_idle, labels, *p.idle_s);
  }
  out.add(SeriesId::gpu_process_series_dropped, {}, v.processes_dropped);
  for (const auto& f : v.findings) {
    out.add(SeriesId::finding_info,
            {std::string(findings::to_string(f.kind)), std::string(findings::to_string(f.severity)),
             f.gpu ? std::to_string(*f.gpu) : std::string(), f.who.pid, f.who.pod, f.who.pod_namespace,
             f.who.container},
            1);
  }
  for (const auto& [who, missing] : v.nccl_missing) {
    out.add(SeriesId::nccl_missing_ranks, {who.pod, who.pod_namespace}, missing);
  }
  return out.take();
}

}  // namespace gpureap::exporter
