#include <fmt/chrono.h>
#include <fmt/format.h>

#include <cstdio>
#include <set>

#include "gpu/snapshot_json.hpp"
#include "report/report.hpp"

namespace gpureap::report {

namespace {

using nlohmann::json;

json nullable(const std::optional<std::uint64_t>& v) { return v ? json(*v) : json(nullptr); }

json container_json(const node::ProcessRecord& r) {
  if (!r.container) return nullptr;
  const auto& c = *r.container;
  json out = {{"id", c.ref.id},
              {"runtime", container::to_string(c.ref.runtime)},
              {"name", c.meta ? json(c.meta->container_name) : json(nullptr)},
              {"deleted", c.deleted},
              {"source", c.meta ? json(c.meta->source) : json(nullptr)}};
  return out;
}

json pod_json(const node::ProcessRecord& r) {
  if (!r.container) return nullptr;
  const auto& c = *r.container;
  auto str_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {{"name", c.meta ? str_or_null(c.meta->pod_name) : json(nullptr)},
          {"namespace", c.meta ? str_or_null(c.meta->pod_namespace) : json(nullptr)},
          {"uid", str_or_null(c.meta && !c.meta->pod_uid.empty() ? c.meta->pod_uid : c.ref.pod_uid)},
          {"qos", container::to_string(c.ref.qos)}};
}

json process_json(const node::NodeSnapshot& snap, const node::ProcessRecord& r) {
  const auto& p = r.process;
  json devices = json::array();
  for (const auto& d : p.gpu_fds) devices.push_back({{"device", d.device}, {"fds", d.count}});
  json listings = json::array();
  for (std::size_t i : r.listings) {
    const auto& l = snap.listings[i];
    listings.push_back({{"gpu", l.device_index},
                        {"driver_pid", l.entry.pid},
                        {"pid_match", node::to_string(l.match)},
                        {"used_memory", nullable(l.entry.used_memory)}});
  }
  json cmd = json::array();
  for (const auto& a : p.cmdline) cmd.push_back(a);
  return {{"pid", p.pid},
          {"ns_pid", p.local_pid()},
          {"nspid", p.nspid},
          {"ppid", p.ppid},
          {"pgid", p.pgrp},
          {"sid", p.session},
          {"uid", p.uid},
          {"state", std::string(1, p.state)},
          {"comm", p.comm},
          {"cmdline", cmd},
          {"gpu_memory", nullable(snap.gpu_memory(r))},
          {"listed", r.listed()},
          {"listings", listings},
          {"devices", devices},
          {"container", container_json(r)},
          {"pod", pod_json(r)}};
}

// nccl_missing_rank's job: identity, the local ranks present and missing, the survivors.
json nccl_group_json(const findings::NcclGroup& g) {
  auto str_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto int_or_null = [](const std::optional<int>& v) { return v ? json(*v) : json(nullptr); };
  json survivors = json::array();
  for (const auto& s : g.survivors) {
    survivors.push_back({{"pid", s.pid},
                         {"comm", s.comm},
                         {"rank", int_or_null(s.rank)},
                         {"local_rank", s.local_rank},
                         {"gpu_memory", nullable(s.gpu_memory)},
                         {"gpus", s.gpus},
                         {"watchdog", findings::to_string(s.watchdog)},
                         {"watchdog_env", s.watchdog_env},
                         {"watchdog_detail", s.watchdog_detail}});
  }
  return {{"scope", g.scope},
          {"run_id", str_or_null(g.run_id)},
          {"master_addr", str_or_null(g.master_addr)},
          {"master_port", int_or_null(g.master_port)},
          {"world_size", int_or_null(g.world_size)},
          {"group_rank", int_or_null(g.group_rank)},
          {"local_world_size", g.local_world_size},
          {"local_world_size_source", g.local_world_size_source},
          {"present_local_ranks", g.present_local_ranks},
          {"missing_local_ranks", g.missing_local_ranks},
          {"zombie_pids", g.zombie_pids},
          {"survivors", survivors},
          {"survivor_memory", g.survivor_memory},
          {"watchdog", g.watchdog}};
}

}  // namespace

namespace {

json finding_json(const findings::Finding& f) {
  json one = {{"kind", findings::to_string(f.kind)},
              {"severity", findings::to_string(f.severity)},
              {"pid", f.pid ? json(*f.pid) : json(nullptr)},
              {"gpu", f.device ? json(*f.device) : json(nullptr)},
              {"message", f.message},
              {"advice", f.advice}};
  if (f.kind == findings::Kind::zombie) one["pids"] = f.pids;
  if (f.kind == findings::Kind::orphaned_context) {
    json holders = json::array();
    for (const auto& h : f.holders) {
      holders.push_back({{"pid", h.pid}, {"comm", h.comm}, {"reason", h.reason}});
    }
    one["holders"] = holders;
  }
  if (f.group) one["group"] = nccl_group_json(*f.group);
  return one;
}

// The processes a trace shows: every GPU-related one, and every one a finding
// names (zombies, orphans). Not gpureap itself.
std::vector<const node::ProcessRecord*> shown_processes(const node::NodeSnapshot& snap,
                                                        const std::vector<findings::Finding>& found) {
  std::set<pid_t> named;
  for (const auto& f : found) {
    if (f.pid) named.insert(*f.pid);
  }
  std::vector<const node::ProcessRecord*> out;
  for (const auto& r : snap.records) {
    if (r.process.pid == snap.self_pid) continue;
    if (gpu_related(r) || named.count(r.process.pid) != 0) out.push_back(&r);
  }
  return out;
}

// The small members of the document, in order, around the two large arrays.
json head_json(const node::NodeSnapshot& snap) {
  json gpu = gpu::snapshot_to_json(snap.gpu);
  gpu["backend"] = snap.gpu_backend;
  if (!snap.gpu_unavailable_reason.empty()) gpu["unavailable_reason"] = snap.gpu_unavailable_reason;
  return {{"schema", kJsonSchema},
          {"taken_at", fmt::format("{:%Y-%m-%dT%H:%M:%S}Z",
                                   fmt::gmtime(std::chrono::system_clock::to_time_t(snap.taken_at)))},
          {"host_root", snap.host_root},
          {"gpu", gpu}};
}

json tail_json(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found) {
  json dead = json::array();
  for (const auto& l : snap.listings) {
    if (l.match != node::PidMatch::dead) continue;
    dead.push_back({{"gpu", l.device_index},
                    {"pid", l.entry.pid},
                    {"used_memory", nullable(l.entry.used_memory)}});
  }
  const Summary s = summarize(snap, found);
  return {{"dead_listed", dead},
          {"summary",
           {{"gpu_processes", s.gpu_processes},
            {"listed", s.listed},
            {"hidden", s.hidden},
            {"dead_listed", s.dead_listed},
            {"zombies", s.zombies},
            {"orphans", s.orphans},
            {"findings", s.findings},
            {"clean", s.findings == 0}}},
          {"scan",
           {{"listed", snap.scan_stats.listed},
            {"scanned", snap.scan_stats.scanned},
            {"vanished", snap.scan_stats.vanished},
            {"denied", snap.scan_stats.denied},
            {"malformed", snap.scan_stats.malformed},
            {"fds_from", snap.scan_stats.fds_from},
            {"fds_note", snap.scan_stats.fds_note}}}};
}

}  // namespace

json trace_json(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found) {
  json doc = head_json(snap);
  json processes = json::array();
  for (const auto* r : shown_processes(snap, found)) processes.push_back(process_json(snap, *r));
  doc["processes"] = std::move(processes);
  json fs = json::array();
  for (const auto& f : found) fs.push_back(finding_json(f));
  doc["findings"] = std::move(fs);
  json tail = tail_json(snap, found);  // items() of a temporary would dangle
  for (auto& [key, value] : tail.items()) doc[key] = std::move(value);
  return doc;
}

bool write_trace_json(std::FILE* out, const node::NodeSnapshot& snap,
                      const std::vector<findings::Finding>& found) {
  // The same document as trace_json, written member by member with one process
  // or finding per line, so a node of thousands of processes never holds the
  // whole tree or its text (the memory target is 10 MiB).
  bool ok = true;
  auto put = [out, &ok](const std::string& text) {
    ok = ok && std::fwrite(text.data(), 1, text.size(), out) == text.size();
  };
  auto member = [&](const std::string& key, const json& value, bool last) {
    put(fmt::format("  {}: {}{}\n", json(key).dump(), json_text(value, -1), last ? "" : ","));
  };
  put("{\n");
  const json head = head_json(snap);
  for (const auto& [key, value] : head.items()) member(key, value, false);
  auto array = [&](const char* key, std::size_t n, const auto& element_at) {
    put(fmt::format("  \"{}\": [", key));
    for (std::size_t i = 0; i < n; ++i) {
      put(fmt::format("{}\n    {}", i ? "," : "", json_text(element_at(i), -1)));
    }
    put(n ? "\n  ],\n" : "],\n");
  };
  const auto shown = shown_processes(snap, found);
  array("processes", shown.size(), [&](std::size_t i) { return process_json(snap, *shown[i]); });
  array("findings", found.size(), [&](std::size_t i) { return finding_json(found[i]); });
  const json tail = tail_json(snap, found);
  std::size_t left = tail.size();
  for (const auto& [key, value] : tail.items()) member(key, value, --left == 0);
  put("}\n");
  return ok && std::fflush(out) == 0;
}

bool write_text(std::FILE* out, const std::string& text) {
  return std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fflush(out) == 0;
}

std::string json_text(const nlohmann::json& doc, int indent) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gpureap::report
