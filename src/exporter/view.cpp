#include "exporter/view.hpp"

#include <algorithm>
#include <set>

namespace gpureap::exporter {

namespace {

Subject subject_of(const node::ProcessRecord& r) {
  Subject s;
  s.pid = std::to_string(r.process.pid);
  s.comm = r.process.comm;
  if (r.container) {
    const auto& c = *r.container;
    s.container = c.meta ? c.meta->container_name : c.ref.id.substr(0, 12);
    if (c.meta) {
      s.pod = c.meta->pod_name;
      s.pod_namespace = c.meta->pod_namespace;
    }
  }
  return s;
}

// The pod a subject-less or gone process belongs to: that of the first live
// holder a context finding names.
Subject subject_of_finding(const node::NodeSnapshot& snap, const findings::Finding& f) {
  Subject s;
  const node::ProcessRecord* r = f.pid ? snap.find(*f.pid) : nullptr;
  if (r != nullptr) s = subject_of(*r);
  // A zombie whose cgroup is no longer readable belongs to its parent's pod.
  if (r != nullptr && !r->container) {
    const node::ProcessRecord* parent = snap.find(r->process.ppid);
    if (parent != nullptr && parent->container) {
      const Subject p = subject_of(*parent);
      s.pod = p.pod;
      s.pod_namespace = p.pod_namespace;
      s.container = p.container;
    }
  }
  if (s.pod.empty()) {
    for (const auto& h : f.holders) {
      const node::ProcessRecord* hr = snap.find(h.pid);
      if (hr == nullptr || !hr->container) continue;
      const Subject held = subject_of(*hr);
      s.pod = held.pod;
      s.pod_namespace = held.pod_namespace;
      s.container = held.container;
      break;
    }
  }
  if (r == nullptr && f.pid) {
    s.pid = std::to_string(*f.pid);
    s.comm.clear();  // gone
  }
  return s;
}

}  // namespace

View build_view(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found,
                const ViewOptions& options) {
  View v;
  v.gpu_backend = snap.gpu_backend;
  v.skipped = ScanCounts{snap.scan_stats.vanished, snap.scan_stats.denied, snap.scan_stats.malformed,
                         snap.scan_stats.fds_denied};
  const gpu::Activity* activity = snap.activity ? &*snap.activity : nullptr;

  for (const auto& d : snap.gpu.devices) {
    GpuView g;
    g.index = d.index;
    g.uuid = d.uuid;
    g.model = d.name;
    if (d.memory) {
      g.used = d.memory->used;
      g.reserved = d.memory->reserved;
      g.total = d.memory->total;
    }
    const gpu::DeviceActivity* da = activity != nullptr ? activity->device(d.index) : nullptr;
    g.utilization_sampled = da != nullptr && da->supported && activity->error.empty();
    v.gpus.push_back(std::move(g));
  }

  // Root causes first: an orphaned context's listing is attributed to its holders' pod.
  std::map<std::pair<unsigned, std::uint32_t>, Subject> gone_owner;
  for (const auto& f : found) {
    if (f.kind == findings::Kind::ghost_memory && f.device && f.bytes) {
      for (auto& g : v.gpus) {
        if (g.index == *f.device) g.ghost_bytes = *f.bytes;
      }
    }
    if (f.kind == findings::Kind::orphaned_context && f.pid && f.device) {
      gone_owner[{*f.device, static_cast<std::uint32_t>(*f.pid)}] = subject_of_finding(snap, f);
    }
    ++v.finding_counts[{f.kind, f.severity}];
    if (f.severity != findings::Severity::info && v.findings.size() < options.max_finding_series) {
      v.findings.push_back(FindingView{f.kind, f.severity, f.device, subject_of_finding(snap, f)});
    }
    if ((f.kind == findings::Kind::nccl_missing_rank || f.kind == findings::Kind::nccl_spin) && f.group) {
      Subject s = subject_of_finding(snap, f);
      v.nccl_missing.emplace_back(Subject{{}, {}, s.pod, s.pod_namespace, {}},
                                  static_cast<unsigned>(f.group->missing_local_ranks.size()));
    }
  }

  // Per process: every driver listing, and every unlisted descriptor holder
  // (memory 0: the driver attributes none to it).
  std::vector<ProcessView> all;
  for (const auto& l : snap.listings) {
    if (!l.entry.used_memory) continue;  // unknown is not 0: no series
    ProcessView p;
    p.gpu = l.device_index;
    p.listed = true;
    p.memory = *l.entry.used_memory;
    if (node::names_gone_process(l.match)) {
      auto it = gone_owner.find({l.device_index, l.entry.pid});
      if (it != gone_owner.end()) p.who = it->second;
      p.who.pid = std::to_string(l.entry.pid);
      p.who.comm.clear();
    } else if (l.record) {
      p.who = subject_of(snap.records[*l.record]);
    }
    if (activity != nullptr) {
      const gpu::DeviceActivity* da = activity->device(l.device_index);
      const gpu::ProcessActivity* a = activity->find(l.device_index, l.entry.pid);
      if (da != nullptr && da->supported && a != nullptr && a->sm_mean) {
        p.sm_ratio = *a->sm_mean / 100.0;
        p.idle_s = a->idle_s;
      }
    }
    all.push_back(std::move(p));
  }
  for (const auto& r : snap.records) {
    if (r.listed() || r.process.gpu_fds.empty() || r.process.zombie() || r.process.pid == snap.self_pid) continue;
    // Each GPU node it holds; control nodes alone name no GPU.
    for (const auto& d : snap.gpu.devices) {
      const std::string node_name = snap.device_node_name(d.index);
      const bool holds = std::any_of(r.process.gpu_fds.begin(), r.process.gpu_fds.end(),
                                     [&node_name](const proc::DeviceUse& u) { return u.device == node_name; });
      if (!holds) continue;
      ProcessView p;
      p.gpu = d.index;
      p.listed = false;
      p.who = subject_of(r);
      all.push_back(std::move(p));
    }
  }
  // Bounded: the largest holders stay, listed before unlisted.
  std::stable_sort(all.begin(), all.end(), [](const ProcessView& a, const ProcessView& b) {
    return a.listed != b.listed ? a.listed : a.memory > b.memory;
  });
  if (all.size() > options.max_process_series) {
    v.processes_dropped = static_cast<unsigned>(all.size() - options.max_process_series);
    all.resize(options.max_process_series);
  }
  v.processes = std::move(all);
  return v;
}

void redact_arguments(node::NodeSnapshot& snap) {
  for (auto& r : snap.records) {
    auto& argv = r.process.cmdline;
    if (argv.size() > 1) argv = proc::Argv{argv.front(), "<redacted>"};
  }
}

}  // namespace gpureap::exporter
