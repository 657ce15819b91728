#include "report/report.hpp"

namespace gpureap::report {

bool gpu_related(const node::ProcessRecord& r) {
  return r.listed() || !r.process.gpu_fds.empty();
}

Summary summarize(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found) {
  Summary s;
  for (const auto& r : snap.records) {
    if (r.process.pid == snap.self_pid) continue;
    if (gpu_related(r)) {
      ++s.gpu_processes;
      if (r.listed()) ++s.listed; else ++s.hidden;
    }
    if (r.process.zombie()) ++s.zombies;
  }
  for (const auto& l : snap.listings) {
    if (node::names_gone_process(l.match)) ++s.dead_listed;
  }
  for (const auto& f : found) {
    if (f.kind == findings::Kind::orphan) ++s.orphans;
    if (f.severity != findings::Severity::info) ++s.findings;
    s.related += static_cast<unsigned>(f.related.size());
  }
  s.scan_skipped = snap.scan_stats.vanished + snap.scan_stats.denied + snap.scan_stats.malformed;
  return s;
}

}  // namespace gpureap::report
