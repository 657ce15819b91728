#include <fmt/format.h>

#include <algorithm>
#include <charconv>
#include <iterator>
#include <map>
#include <set>
#include <string_view>

#include "findings/contexts.hpp"
#include "findings/finding.hpp"

namespace gpureap::findings {

std::string_view to_string(Kind k) {
  switch (k) {
    case Kind::zombie: return "zombie";
    case Kind::orphan: return "orphan";
    case Kind::orphaned_context: return "orphaned_context";
    case Kind::latent_orphaned_context:
      return "latent_orphaned_context";
    case Kind::hidden_holder: return "hidden_holder";
    case Kind::ghost_memory: return "ghost_memory";
    case Kind::nccl_missing_rank: return "nccl_missing_rank";
    case Kind::idle_holder: return "idle_holder";
    case Kind::nccl_spin: return "nccl_spin";
  }
  return "unknown";
}

std::string_view to_string(Severity s) {
  switch (s) {
    case Severity::info: return "info";
    case Severity::warning: return "warning";
    case Severity::critical: return "critical";
  }
  return "unknown";
}

namespace {

using node::NodeSnapshot;
using node::ProcessRecord;

// A number in decimal, appended: fmt::format_to into a std::string goes
// through a buffer of its own each time, and thousands of findings add three
// or four numbers each.
template <class T>
void append_number(std::string& s, T v) {
  char digits[24];
  s.append(digits, std::to_chars(digits, digits + sizeof digits, v).ptr);
}

// "pid 123 (python3)" plus ", pod ns/name container c" when known.
// Appended to `s` with no string of its own: thousands of findings use it.
void append_description(std::string& s, const ProcessRecord& r) {
  auto out = std::back_inserter(s);
  s += "pid ";
  append_number(s, r.process.pid);
  s += " (";
  s += r.process.comm;
  s += ')';
  if (r.process.nspid.size() >= 2) {
    s += ", local pid ";
    append_number(s, r.process.local_pid());
  }
  if (r.container) {
    const auto& c = *r.container;
    if (c.meta && !c.meta->pod_name.empty()) {
      fmt::format_to(out, ", pod {}/{} container {}", c.meta->pod_namespace, c.meta->pod_name,
                     c.meta->container_name);
    } else {
      fmt::format_to(out, ", container {}", std::string_view(c.ref.id).substr(0, 12));
      if (!c.ref.pod_uid.empty()) fmt::format_to(out, " of pod uid {}", c.ref.pod_uid);
    }
    if (c.deleted) s += " (deleted)";
  } else {
    s += ", host process";
  }
}

std::string describe(const ProcessRecord& r) {
  std::string s;
  append_description(s, r);
  return s;
}

bool holds_gpu(const ProcessRecord& r) { return !r.process.gpu_fds.empty(); }

bool is_device_node(std::string_view name) {
  // nvidia0, nvidia1, … (a GPU); nvidiactl, nvidia-uvm, nvidia-modeset are control nodes.
  return name.size() > 6 && name.substr(0, 6) == "nvidia" &&
         name.find_first_not_of("0123456789", 6) == std::string_view::npos;
}

bool holds_device_node(const ProcessRecord& r) {
  return std::any_of(r.process.gpu_fds.begin(), r.process.gpu_fds.end(),
                     [](const proc::DeviceUse& d) { return is_device_node(d.device); });
}

void append_device_list(std::string& s, const ProcessRecord& r) {
  bool first = true;
  for (const auto& d : r.process.gpu_fds) {
    if (!first) s += ", ";
    first = false;
    s += d.device;
    s += "×";
    append_number(s, d.count);
  }
}

std::string device_list(const ProcessRecord& r) {
  std::string s;
  append_device_list(s, r);
  return s;
}

}  // namespace

std::vector<Finding> detect_zombies(const NodeSnapshot& snap) {
  // Zombies pile up by the thousand under a parent that never waits: one
  // finding per parent, naming all of them, is what an operator can act on.
  std::map<pid_t, std::vector<const ProcessRecord*>> by_parent;
  for (const auto& r : snap.records) {
    if (r.process.zombie()) by_parent[r.process.ppid].push_back(&r);
  }
  std::vector<Finding> out;
  for (const auto& [ppid, zombies] : by_parent) {
    const ProcessRecord* parent = snap.find(ppid);
    const ProcessRecord& first = *zombies.front();
    Finding f;
    f.kind = Kind::zombie;
    f.severity = Severity::warning;
    f.pid = first.process.pid;
    for (const auto* z : zombies) f.pids.push_back(z->process.pid);
    const std::string parent_name =
        parent ? fmt::format("pid {} ({})", ppid, parent->process.comm) : fmt::format("pid {}", ppid);
    if (zombies.size() == 1) {
      f.message = fmt::format("{} is a zombie: its parent {} has not reaped it", describe(first),
                              parent_name);
    } else {
      std::string list;
      for (std::size_t i = 0; i < zombies.size() && i < 5; ++i) {
        list += fmt::format("{}{}", i ? ", " : "", zombies[i]->process.pid);
      }
      if (zombies.size() > 5) list += ", …";
      f.message = fmt::format("{} zombies ({}) under parent {}; the first: {}", zombies.size(), list,
                              parent_name, describe(first));
    }
    if (parent && parent->process.nspid.size() >= 2 && parent->process.local_pid() == 1) {
      f.message += "; the parent is the container's PID 1, which does not reap";
      f.advice =
          "Run an init as the container's PID 1 (gpureap-init or tini) so zombies are reaped; "
          "restarting the pod clears them now.";
    } else {
      f.advice = "Fix the parent to wait() for its children, or kill the parent (its zombies go "
                 "to an init that reaps them); restarting the pod clears them.";
    }
    out.push_back(std::move(f));
  }
  return out;
}

namespace {

// detect_orphans and detect_hidden_holders make one finding per process:
// detect_all has them append to its own vector, so a node of thousands never
// holds two copies of them (trace's memory target is 10 MiB).
void append_orphans(const NodeSnapshot& snap, std::vector<Finding>& out) {
  for (const auto& r : snap.records) {
    if (!r.container || r.process.zombie()) continue;
    const auto& p = r.process;
    if (p.nspid.size() >= 2 && p.local_pid() == 1) continue;  // the container's init itself
    const ProcessRecord* init = snap.container_init(r);
    std::string adopted_by;
    if (p.ppid == 1) {
      adopted_by = "the host's PID 1";
    } else if (init != nullptr && p.ppid == init->process.pid &&
               (p.session != init->process.session || snap.find(p.session) == nullptr ||
                snap.find(p.pgrp) == nullptr)) {
      // The kernel records no "forked by"; what survives a dead parent is its
      // session and process group. A child the init started itself shares the
      // init's session and has a live group leader (tini's child leads its own
      // group; bash's children share bash's). An adopted one comes from another
      // session (an exec'd shell) or has lost its group or session leader.
      adopted_by = fmt::format("the container's PID 1 ({})", init->process.comm);
    } else {
      continue;
    }
    Finding f;
    f.kind = Kind::orphan;
    f.severity = Severity::warning;
    f.pid = p.pid;
    f.message = fmt::format("{} is an orphan: its parent exited and it was reparented to {}",
                            describe(r), adopted_by);
    if (holds_gpu(r)) f.message += fmt::format("; it holds GPU descriptors ({})", device_list(r));
    f.advice =
        "Make the parent wait for its workers and stop them on exit; run an init as PID 1 "
        "(gpureap-init) so orphans are reaped and signalled at shutdown.";
    out.push_back(std::move(f));
  }
}

void append_hidden_holders(const NodeSnapshot& snap, const DetectOptions& opt,
                           std::vector<Finding>& out) {
  const ContextEvidence evidence(snap, opt);
  for (const auto& r : snap.records) {
    if (!holds_gpu(r) || r.listed() || r.process.pid == snap.self_pid) continue;
    const bool monitor = std::find(opt.monitor_comms.begin(), opt.monitor_comms.end(),
                                   r.process.comm) != opt.monitor_comms.end();
    Finding f;
    f.kind = Kind::hidden_holder;
    f.pid = r.process.pid;
    f.message.reserve(192);  // one allocation for most: thousands of these
    append_description(f.message, r);
    f.message += " holds GPU descriptors (";
    append_device_list(f.message, r);
    f.message += ") but the driver does not list it";
    if (monitor) {
      f.severity = Severity::info;
      f.advice = "A known GPU monitor (an NVML client holds descriptors without a context).";
    } else if (!holds_device_node(r)) {
      f.severity = Severity::info;
      f.advice = "Holds only control nodes; usually harmless.";
    } else if (evidence.driver_client(r)) {
      f.severity = Severity::info;
      // docs/contexts.md: it shares no description with a listed process and
      // holds no gone creator's context by the evidence.
      f.message += ": a driver client without a GPU context";
      f.advice =
          "Nothing to do: NVML clients (monitoring agents, nvidia-smi) hold descriptors "
          "without a context.";
    } else {
      f.severity = Severity::warning;
      f.advice =
          "It may keep another process's context alive (inherited descriptors) or be a driver "
          "client in another PID namespace; check what it is, and end it or its pod if it "
          "should not hold the GPU.";
    }
    out.push_back(std::move(f));
  }
}

}  // namespace

std::vector<Finding> detect_orphans(const NodeSnapshot& snap) {
  std::vector<Finding> out;
  append_orphans(snap, out);
  return out;
}

std::vector<Finding> detect_hidden_holders(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> out;
  append_hidden_holders(snap, opt, out);
  return out;
}

std::vector<Finding> detect_ghost_memory(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> out;
  for (const auto& d : snap.gpu.devices) {
    if (!d.memory) continue;
    Finding f;
    if (d.memory->reserved) {
      // v2: `used` excludes reserved memory; any used memory with no process listed is a ghost.
      if (!d.processes.empty() || d.memory->used < opt.ghost_threshold_bytes) continue;
      f.bytes = d.memory->used;
      f.message = fmt::format(
          "GPU {} ({}) has {} MiB used by v2 accounting (reserved {} MiB not counted) and the "
          "driver lists no process",
          d.index, d.uuid, d.memory->used >> 20, *d.memory->reserved >> 20);
    } else {
      // v1 only: `used` includes reserved memory, so what no listed process
      // explains must exceed the threshold plus an allowance for it.
      std::uint64_t listed = 0;
      bool known = true;
      for (const auto& p : d.processes) {
        if (!p.used_memory) known = false;
        listed += p.used_memory.value_or(0);
      }
      if (!known) continue;  // a process of unknown size may explain it all
      const std::uint64_t unexplained = d.memory->used > listed ? d.memory->used - listed : 0;
      if (unexplained < opt.ghost_threshold_bytes + opt.v1_reserved_allowance_bytes) continue;
      f.bytes = unexplained;
      f.message = fmt::format(
          "GPU {} ({}) has {} MiB used by v1 accounting (reserved memory included: the driver "
          "has no v2 memory info), {} MiB of it explained by no listed process: more than the "
          "{} MiB threshold plus {} MiB allowed for reserved memory",
          d.index, d.uuid, d.memory->used >> 20, unexplained >> 20, opt.ghost_threshold_bytes >> 20,
          opt.v1_reserved_allowance_bytes >> 20);
    }
    f.kind = Kind::ghost_memory;
    f.severity = Severity::critical;
    f.device = d.index;
    f.advice =
        "Look for holders in other PID namespaces (run with hostPID) and hidden holders; if "
        "none, drain the node and reset the GPU (nvidia-smi --gpu-reset) or reboot.";
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Finding> detect_idle_holders(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> out;
  if (!snap.activity) return out;
  const gpu::Activity& activity = *snap.activity;
  for (const auto& l : snap.listings) {
    if (node::names_gone_process(l.match) || !l.record || !l.entry.used_memory) continue;
    if (*l.entry.used_memory < opt.idle_min_bytes) continue;
    const gpu::DeviceActivity* dev = activity.device(l.device_index);
    const gpu::ProcessActivity* a = activity.find(l.device_index, l.entry.pid);
    if (dev == nullptr || !dev->supported || a == nullptr || a->idle_s < opt.idle_seconds) continue;
    const ProcessRecord& r = snap.records[*l.record];
    if (r.process.zombie()) continue;
    Finding f;
    f.kind = Kind::idle_holder;
    f.severity = Severity::warning;
    f.pid = r.process.pid;
    f.device = l.device_index;
    f.bytes = l.entry.used_memory;
    f.message = fmt::format(
        "{} holds {} MiB on GPU {} and has run nothing on it (0 % SM) for {:.1f} min (sampled every {:.0f} s)",
        describe(r), *l.entry.used_memory >> 20, l.device_index, a->idle_s / 60, activity.period_s);
    f.advice =
        "An idle holder keeps the GPU from every other pod: stop it or its pod if it is a forgotten "
        "notebook or a stuck job; a job waiting on a dead peer shows up as nccl_missing_rank.";
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Finding> detect_nccl_spin(const NodeSnapshot& snap, const std::vector<Finding>& missing_ranks,
                                      const DetectOptions& opt) {
  std::vector<Finding> out;
  if (!snap.activity) return out;
  const gpu::Activity& activity = *snap.activity;
  for (const auto& m : missing_ranks) {
    if (m.kind != Kind::nccl_missing_rank || !m.group || m.group->survivors.empty()) continue;
    double sm_min = 100;
    double seen_min = -1;
    std::uint64_t drift = 0;
    bool all_judged = true;
    for (const auto& s : m.group->survivors) {
      const ProcessRecord* r = snap.find(s.pid);
      bool judged = false;
      // The survivor's own listings (the driver may list it under a local PID).
      for (std::size_t li : r != nullptr ? r->listings : std::vector<std::size_t>{}) {
        const auto& l = snap.listings[li];
        const gpu::DeviceActivity* dev = activity.device(l.device_index);
        const gpu::ProcessActivity* a = activity.find(l.device_index, l.entry.pid);
        if (dev == nullptr || !dev->supported || a == nullptr || !a->sm_mean) continue;
        judged = true;
        sm_min = std::min(sm_min, *a->sm_mean);
        seen_min = seen_min < 0 ? a->observed_s : std::min(seen_min, a->observed_s);
        if (a->memory_min && a->memory_max) drift = std::max(drift, *a->memory_max - *a->memory_min);
      }
      all_judged = all_judged && judged;
    }
    if (!all_judged || sm_min < opt.spin_sm_percent || seen_min < opt.spin_seconds ||
        drift > opt.spin_memory_tolerance_bytes) {
      continue;
    }
    const NcclGroup& g = *m.group;
    Finding f;
    f.kind = Kind::nccl_spin;
    f.severity = Severity::critical;
    f.pid = m.pid;
    f.device = m.device;
    f.bytes = g.survivor_memory;
    f.group = m.group;
    std::string pids;
    for (const auto& s : g.survivors) pids += fmt::format("{}{}", pids.empty() ? "" : ", ", s.pid);
    std::string missing;
    for (int r : g.missing_local_ranks) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", r);
    f.message = fmt::format(
        "torch.distributed job{} ({}): local rank(s) {} are gone and the survivors (pids {}) have spun at "
        "{:.0f} % SM or more for {:.1f} min with flat memory (moved {} MiB), holding {} MiB: NCCL waits "
        "for the dead peer",
        g.run_id.empty() ? "" : " " + g.run_id, g.scope, missing, pids, sm_min, seen_min / 60, drift >> 20,
        g.survivor_memory >> 20);
    f.advice =
        "Delete the pod (or kill the survivors) now: NCCL has no collective timeout. Fix the job: "
        "TORCH_NCCL_ASYNC_ERROR_HANDLING on and a short init_process_group(timeout=...).";
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Finding> detect_all(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> nccl = detect_nccl_missing_ranks(snap);
  std::vector<Finding> spin = detect_nccl_spin(snap, nccl, opt);
  // One root cause: a spinning job's missing-rank finding is related to its spin.
  for (auto& s : spin) {
    auto it = std::find_if(nccl.begin(), nccl.end(), [&s](const Finding& n) { return n.group == s.group; });
    if (it == nccl.end()) continue;
    s.related.push_back(std::move(*it));
    nccl.erase(it);
  }
  std::vector<Finding> parts[] = {detect_orphaned_contexts(snap, opt),
                                  detect_latent_orphaned_contexts(snap),
                                  detect_ghost_memory(snap, opt),
                                  std::move(spin),
                                  std::move(nccl),
                                  detect_idle_holders(snap, opt),
                                  detect_zombies(snap)};
  // One allocation: at most one orphan and one hidden holder per process.
  // Reserved pages that are never written take no memory.
  std::size_t total = 2 * snap.records.size();
  for (const auto& p : parts) total += p.size();
  std::vector<Finding> all;
  all.reserve(total);
  for (auto& p : parts) {
    for (auto& f : p) all.push_back(std::move(f));
    std::vector<Finding>().swap(p);
  }
  append_orphans(snap, all);
  append_hidden_holders(snap, opt, all);
  group_related(all);
  return all;
}

void group_related(std::vector<Finding>& findings) {
  // Which context finding names each holder (the first that does).
  std::map<pid_t, std::size_t> owner;
  for (std::size_t i = 0; i < findings.size(); ++i) {
    const auto k = findings[i].kind;
    if (k != Kind::orphaned_context && k != Kind::latent_orphaned_context) continue;
    for (const auto& h : findings[i].holders) owner.try_emplace(h.pid, i);
  }
  if (owner.empty()) return;
  std::vector<bool> folded(findings.size(), false);
  for (std::size_t i = 0; i < findings.size(); ++i) {
    auto& f = findings[i];
    if ((f.kind != Kind::orphan && f.kind != Kind::hidden_holder) || !f.pid) continue;
    auto it = owner.find(*f.pid);
    if (it == owner.end()) continue;
    findings[it->second].related.push_back(std::move(f));
    folded[i] = true;
  }
  std::size_t kept = 0;
  for (std::size_t i = 0; i < findings.size(); ++i) {
    if (folded[i]) continue;
    if (kept != i) findings[kept] = std::move(findings[i]);
    ++kept;
  }
  findings.resize(kept);
}

bool fails_check(const std::vector<Finding>& findings) {
  return std::any_of(findings.begin(), findings.end(),
                     [](const Finding& f) { return f.severity != Severity::info; });
}

}  // namespace gpureap::findings
