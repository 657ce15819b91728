#include "lab/measurements.hpp"

#include <fmt/format.h>

#include <cmath>

namespace gpureap::lab {

namespace {

using nlohmann::json;

template <class T>
json or_null(const std::optional<T>& v) {
  return v ? json(*v) : json(nullptr);
}

// Seconds rounded to the millisecond, for reading.
double ms(double s) {
  return std::round(s * 1000.0) / 1000.0;
}

json opt_seconds(const std::optional<double>& v) {
  return v ? json(ms(*v)) : json(nullptr);
}

std::string fmt_s(double s) {
  return fmt::format("{:.2f} s", s);
}

json findings_json(const std::vector<SeenFinding>& fs) {
  json arr = json::array();
  for (const auto& f : fs) {
    arr.push_back({{"kind", f.kind},
                   {"severity", f.severity},
                   {"pid", or_null(f.pid)},
                   {"gpu", or_null(f.gpu)},
                   {"holders", f.holders},
                   {"related", f.related},
                   {"message", f.message}});
  }
  return arr;
}

}  // namespace

std::optional<double> release_time(const std::vector<Sample>& series) {
  if (series.empty()) return std::nullopt;
  if (series.back().bytes != 0) return std::nullopt;
  std::size_t i = series.size();
  while (i > 0 && series[i - 1].bytes == 0) --i;
  return series[i].t;
}

double gib_seconds(const std::vector<Sample>& series, std::optional<double> until) {
  double total = 0;
  for (std::size_t i = 0; i < series.size(); ++i) {
    const double start = i == 0 ? 0.0 : series[i].t;
    double end = i + 1 < series.size() ? series[i + 1].t : series[i].t;
    if (until) end = std::min(end, *until);
    if (end > start) total += static_cast<double>(series[i].bytes) / kGiB * (end - start);
    if (until && end >= *until) break;
  }
  return total;
}

std::string release_cause(const Measurements& m) {
  const auto& ev = m.deletion;
  if (m.gpu_bytes_at_delete == 0) return "nothing was held when the deletion started";
  if (!m.gpu_release_after_delete_s)
    return "never released: the memory was still held when the lab stopped watching";
  const double r = *m.gpu_release_after_delete_s;
  // The driver frees memory ~0.1 s after its holder dies (FACTS.md); samples
  // come every 10 ms: an event up to this long before the release explains it.
  constexpr double kSlack = 1.0;
  if (m.term_reached_worker && m.term_reached_worker_s && r <= *m.term_reached_worker_s + kSlack) {
    return "the worker's own SIGTERM handler released the GPU and exited (" + fmt_s(r) + ")";
  }
  if (m.init_escalated && r < ev.kill_pid1_s.value_or(1e300)) {
    return "gpureap-init sent SIGKILL to the TERM-ignoring GPU holder after its --gpu-grace (" +
           fmt_s(r) + ")";
  }
  if (ev.prestop_ended_s && r <= *ev.prestop_ended_s + kSlack && r < ev.term_pid1_s + kSlack) {
    return "the preStop hook's SIGKILL after its SIGTERM wait (" + fmt_s(r) +
           "), before the kubelet's SIGTERM";
  }
  if (ev.kill_pid1_s && r >= *ev.kill_pid1_s - kSlack) {
    return "the runtime's SIGKILL of PID 1 when the grace ran out (" + fmt_s(*ev.kill_pid1_s) +
           "): the PID namespace ended with it and the kernel killed the worker";
  }
  if (ev.pid1_exited_s && !ev.kill_pid1_s) {
    return "PID 1 (" + m.pid1 + ") exited " + fmt_s(*ev.pid1_exited_s - ev.term_pid1_s) +
           " after its SIGTERM; the kernel then killed every other process of the PID namespace "
           "(SIGKILL: no "
           "cleanup ran in the worker)";
  }
  return "released " + fmt_s(r) + " after the deletion started";
}

json to_json(const Measurements& m) {
  json steps = json::array();
  for (const auto& s : m.steps) {
    json observe = nullptr;
    if (s.observe_exit) {
      observe = {{"exit", *s.observe_exit},
                 {"pid1", s.pid1},
                 {"pid1_is_init", s.pid1_is_init},
                 {"zombies", s.zombies},
                 {"orphans", s.orphans},
                 {"listed_dead", s.listed_dead},
                 {"findings", findings_json(s.observe_findings)}};
    }
    json trace = nullptr;
    if (s.trace_exit) {
      trace = {{"exit", *s.trace_exit},
               {"pod_named", s.pod_named},
               {"findings", findings_json(s.trace_findings)}};
    }
    steps.push_back({{"step", s.step},
                     {"t", ms(s.t)},
                     {"gpu_bytes", s.gpu_bytes},
                     {"observe", observe},
                     {"trace", trace},
                     {"error", s.error.empty() ? json(nullptr) : json(s.error)}});
  }
  const auto& ev = m.deletion;
  json deletion = {{"prestop_started_s", opt_seconds(ev.prestop_started_s)},
                   {"prestop_ended_s", opt_seconds(ev.prestop_ended_s)},
                   {"prestop_exit", or_null(ev.prestop_exit)},
                   {"prestop_timed_out", ev.prestop_timed_out},
                   {"remaining_grace_s", ms(ev.remaining_grace_s)},
                   {"term_pid1_s", ms(ev.term_pid1_s)},
                   {"pid1_exited_s", opt_seconds(ev.pid1_exited_s)},
                   {"pid1_status", or_null(ev.pid1_status)},
                   {"kill_pid1_s", opt_seconds(ev.kill_pid1_s)},
                   {"kill_cgroup_s", ms(ev.kill_cgroup_s)},
                   {"killed_in_cgroup", ev.killed_in_cgroup},
                   {"cgroup_empty_s", opt_seconds(ev.cgroup_empty_s)}};
  json timeline = json::array();
  for (const auto& s : m.timeline) timeline.push_back({ms(s.t), s.bytes});
  return {
      {"schema", 1},
      {"scenario", m.scenario},
      {"instance", m.instance},
      {"title", m.title},
      {"label", m.label},
      {"variant", {{"workers", m.workers}, {"uid", m.uid}}},
      {"runtime", m.runtime},
      {"workload", m.workload},
      {"gpu_backend", m.gpu_backend},
      {"driver_version", m.driver_version},
      {"gpu_name", m.gpu_name},
      {"gpu_index", m.gpu_index},
      {"quick", m.quick},
      {"time_scale", m.time_scale},
      {"pod", m.pod},
      {"pid1", m.pid1},
      {"pid1_command", m.pid1_command},
      {"grace_s", m.grace_s},
      {"prestop_term_wait_s", or_null(m.prestop_term_wait_s)},
      {"init_gpu_grace_s", or_null(m.init_gpu_grace_s)},
      {"plan_expected_hold_s", or_null(m.plan_expected_hold_s)},
      {"not_run", or_null(m.not_run)},
      {"error", or_null(m.error)},
      {"zombies", m.zombies},
      {"orphans", m.orphans},
      {"orphaned_contexts", m.orphaned_contexts},
      {"orphaned_context_holders", m.orphaned_context_holders},
      {"forked_children", m.forked_children},
      {"hidden_holders", m.hidden_holders},
      {"latent_orphaned_contexts", m.latent_orphaned_contexts},
      {"term_reached_worker", m.term_reached_worker},
      {"term_reached_worker_s", opt_seconds(m.term_reached_worker_s)},
      {"gpu_bytes_at_delete", m.gpu_bytes_at_delete},
      {"gpu_release_after_delete_s", opt_seconds(m.gpu_release_after_delete_s)},
      {"gpu_gib_seconds_during_termination",
       std::round(m.gpu_gib_seconds_during_termination * 1000.0) / 1000.0},
      {"survivors_after_delete", m.survivors_after_delete},
      {"gpu_bytes_after_delete", m.gpu_bytes_after_delete},
      {"init_escalated", m.init_escalated},
      {"release_cause", m.release_cause},
      {"deletion", deletion},
      {"steps", steps},
      {"sample_period_s", m.sample_period_s},
      {"timeline", timeline},
  };
}

}  // namespace gpureap::lab
