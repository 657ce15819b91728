#include "lab/reading.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace gpureap::lab {

namespace {

using nlohmann::json;

const json& array_of(const json& j, const char* key) {
  static const json kEmpty = json::array();
  auto it = j.find(key);
  return it != j.end() && it->is_array() ? *it : kEmpty;
}

SeenFinding finding_of(const json& f) {
  SeenFinding s;
  s.kind = text_field(f, "kind");
  s.severity = text_field(f, "severity");
  s.pid = pid_field(f, "pid");
  s.message = text_field(f, "message");
  if (auto g = f.find("gpu"); g != f.end() && g->is_number_unsigned()) s.gpu = g->get<unsigned>();
  for (const auto& h : array_of(f, "holders")) {
    if (auto p = pid_field(h, "pid")) s.holders.push_back(*p);
  }
  return s;
}

std::string joined_cmdline(const json& p) {
  std::string out;
  for (const auto& a : array_of(p, "cmdline")) {
    if (!a.is_string()) continue;
    if (!out.empty()) out += ' ';
    out += a.get<std::string>();
  }
  return out.empty() ? text_field(p, "comm") : out;
}

}  // namespace

std::optional<pid_t> as_pid(const json& v) {
  if (!v.is_number_integer()) return std::nullopt;
  const auto n = v.get<std::int64_t>();
  if (n <= 0 || n > std::numeric_limits<pid_t>::max()) return std::nullopt;
  return static_cast<pid_t>(n);
}

std::optional<pid_t> pid_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it == j.end() ? std::nullopt : as_pid(*it);
}

std::string text_field(const json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

void read_observe(const json& doc, StepReport& step) {
  if (!doc.is_object()) return;
  if (auto it = doc.find("pid1"); it != doc.end() && it->is_object()) {
    step.pid1 = joined_cmdline(*it);
    step.pid1_is_init = it->value("is_init", false);
  }
  for (const auto& z : array_of(doc, "zombies")) {
    if (auto p = pid_field(z, "pid")) step.zombies.push_back(*p);
  }
  // Only the adopted ones: PID 1's own children (tini's `sleep`) are not orphans.
  for (const auto& o : array_of(doc, "orphans")) {
    auto p = pid_field(o, "pid");
    auto adopted = o.find("adopted");
    if (p && adopted != o.end() && adopted->is_boolean() && adopted->get<bool>())
      step.orphans.push_back(*p);
  }
  if (auto it = doc.find("orphaned_context"); it != doc.end() && it->is_object()) {
    if (auto d = it->find("dead"); d != it->end() && d->is_number_unsigned())
      step.listed_dead = d->get<unsigned>();
  }
  for (const auto& f : array_of(doc, "findings")) step.observe_findings.push_back(finding_of(f));
}

void read_trace(const json& doc, const ScenarioIdentity& id, StepReport& step) {
  if (!doc.is_object()) return;
  std::set<pid_t> mine = id.host_pids;
  for (const auto& p : array_of(doc, "processes")) {
    auto pod = p.find("pod");
    if (pod == p.end() || !pod->is_object() || text_field(*pod, "uid") != id.pod_uid) continue;
    if (auto pid = pid_field(p, "pid")) mine.insert(*pid);
    step.pod_named = step.pod_named || !text_field(*pod, "name").empty();
  }
  auto ours = [&](const std::optional<pid_t>& p) { return p && mine.count(*p) != 0; };
  for (const auto& f : array_of(doc, "findings")) {
    SeenFinding s = finding_of(f);
    // By its subject: a process of the pod (or a dead one that was), or one of
    // a zombie group. Not by the holders an orphaned context names: on a shared
    // GPU trace names every unlisted holder of the device as a possible heir.
    bool belongs = ours(s.pid);
    for (const auto& z : array_of(f, "pids")) {
      if (z.is_number_integer()) belongs = belongs || mine.count(z.get<pid_t>()) != 0;
    }
    if (!belongs && id.device) {
      // A device of its own: what the driver lists there is its own, whatever
      // PID it gives (the simulated driver lists a dead creator by its local PID).
      auto g = f.find("gpu");
      belongs = g != f.end() && g->is_number_unsigned() && g->get<unsigned>() == *id.device &&
                (s.kind == "orphaned_context" || s.kind == "ghost_memory");
    }
    if (!belongs) continue;
    step.trace_findings.push_back(std::move(s));
    // Findings trace grouped under this one (the orphans and hidden holders
    // that are the holders of its orphaned context): same root cause, kept.
    for (const auto& r : array_of(f, "related")) {
      SeenFinding rel = finding_of(r);
      rel.related = true;
      step.trace_findings.push_back(std::move(rel));
    }
  }
}

}  // namespace gpureap::lab
