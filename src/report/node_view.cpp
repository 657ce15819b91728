// The plan's node view (node-observe.sh): GPU summary, the driver's processes,
// descriptor holders the driver does not list, ghost memory — short, for a human.
#include <fmt/format.h>

#include "report/report.hpp"

namespace gpureap::report {

std::string render_node_report(const node::NodeSnapshot& snap,
                               const std::vector<findings::Finding>& found) {
  std::string out;
  out += fmt::format("GPUs ({} backend{}):\n", snap.gpu_backend,
                     snap.gpu.driver_version.empty() ? "" : ", driver " + snap.gpu.driver_version);
  if (snap.gpu.devices.empty()) {
    out += fmt::format("  none: {}\n", snap.gpu_unavailable_reason.empty()
                                           ? "the backend reports no devices"
                                           : snap.gpu_unavailable_reason);
  }
  for (const auto& d : snap.gpu.devices) {
    std::string mem = "memory n/a";
    if (d.memory) {
      mem = fmt::format("{} / {} used", format_bytes(d.memory->used), format_bytes(d.memory->total));
      mem += d.memory->reserved ? fmt::format(" (+{} reserved)", format_bytes(*d.memory->reserved))
                                : " (v1 accounting: includes reserved)";
    }
    out += fmt::format("  [{}] {} {}  {}  {} process(es)\n", d.index, d.name, d.uuid, mem,
                       d.processes.size());
  }

  out += "\nDriver-listed processes:\n";
  if (snap.listings.empty()) out += "  none\n";
  for (const auto& l : snap.listings) {
    std::string who = "no such process";
    if (l.record) {
      const auto& p = snap.records[*l.record].process;
      who = fmt::format("{} state {}", p.comm, p.state);
      if (l.match == node::PidMatch::stale) {
        who += " holds no GPU descriptor: not the owner (stale pid)";
      } else if (l.match != node::PidMatch::host) {
        who += fmt::format(" (matched as {})", node::to_string(l.match));
      }
    }
    out += fmt::format("  gpu {}  pid {:<8} {:>10}  {}\n", l.device_index, l.entry.pid,
                       l.entry.used_memory ? format_bytes(*l.entry.used_memory) : "n/a", who);
  }

  out += "\nDescriptor holders not listed by the driver:\n";
  bool any_hidden = false;
  for (const auto& r : snap.records) {
    if (r.process.gpu_fds.empty() || r.listed() || r.process.pid == snap.self_pid) continue;
    any_hidden = true;
    std::string devices;
    for (const auto& d : r.process.gpu_fds) devices += fmt::format(" {}×{}", d.device, d.count);
    out += fmt::format("  pid {:<8} {:<16}{}\n", r.process.pid, r.process.comm, devices);
  }
  if (!any_hidden) out += "  none\n";

  out += "\nGhost memory:\n";
  bool any_ghost = false;
  for (const auto& f : found) {
    if (f.kind != findings::Kind::ghost_memory) continue;
    any_ghost = true;
    out += fmt::format("  {}\n", f.message);
  }
  if (!any_ghost) out += "  none\n";

  bool header = false;
  for (const auto& f : found) {
    if (f.severity == findings::Severity::info || f.kind == findings::Kind::ghost_memory) continue;
    if (!header) out += "\nFindings:\n";
    header = true;
    out += fmt::format("  [{}] {}: {}\n", findings::to_string(f.severity), findings::to_string(f.kind),
                       f.message);
  }
  return out;
}

}  // namespace gpureap::report
