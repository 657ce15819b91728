#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "findings/finding.hpp"

namespace gpureap::findings {

std::string_view to_string(Kind k) {
  switch (k) {
    case Kind::zombie: return "zombie";
    case Kind::orphan: return "orphan";
    case Kind::orphaned_context: return "orphaned_context";
    case Kind::hidden_holder: return "hidden_holder";
    case Kind::ghost_memory: return "ghost_memory";
    case Kind::nccl_missing_rank: return "nccl_missing_rank";
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

// "pid 123 (python3)" plus ", pod ns/name container c" when known.
std::string describe(const ProcessRecord& r) {
  std::string s = fmt::format("pid {} ({})", r.process.pid, r.process.comm);
  if (r.process.nspid.size() >= 2) s += fmt::format(", local pid {}", r.process.local_pid());
  if (r.container) {
    const auto& c = *r.container;
    if (c.meta && !c.meta->pod_name.empty()) {
      s += fmt::format(", pod {}/{} container {}", c.meta->pod_namespace, c.meta->pod_name,
                       c.meta->container_name);
    } else {
      s += fmt::format(", container {}", c.ref.id.substr(0, 12));
      if (!c.ref.pod_uid.empty()) s += fmt::format(" of pod uid {}", c.ref.pod_uid);
    }
    if (c.deleted) s += " (deleted)";
  } else {
    s += ", host process";
  }
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

std::string device_list(const ProcessRecord& r) {
  std::string s;
  for (const auto& d : r.process.gpu_fds) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{}×{}", d.device, d.count);
  }
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

std::vector<Finding> detect_orphans(const NodeSnapshot& snap) {
  std::vector<Finding> out;
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
  return out;
}

std::vector<Finding> detect_orphaned_contexts(const NodeSnapshot& snap) {
  std::vector<Finding> out;
  for (const auto& l : snap.listings) {
    if (!node::names_gone_process(l.match)) continue;
    const auto dead = static_cast<pid_t>(l.entry.pid);
    const std::string device_name = [&] {
      for (const auto& d : snap.gpu.devices) {
        if (d.index == l.device_index && d.minor) return fmt::format("nvidia{}", *d.minor);
      }
      return fmt::format("nvidia{}", l.device_index);
    }();
    Finding f;
    f.kind = Kind::orphaned_context;
    f.severity = Severity::critical;
    f.pid = dead;
    f.device = l.device_index;
    const std::string memory =
        l.entry.used_memory ? fmt::format("{} MiB", *l.entry.used_memory >> 20) : "memory n/a";
    const proc::Process* now = snap.pid_now(l);
    if (now != nullptr) {
      f.message = fmt::format(
          "the driver lists pid {} on GPU {} ({}) but {}: its context outlives the process that "
          "made it",
          dead, l.device_index, memory,
          now->zombie()
              ? fmt::format("that process ({}) is a zombie and holds no GPU descriptor", now->comm)
              : fmt::format("pid {} is now {}, which holds no GPU descriptor (the pid "
                            "was reused)",
                            dead, now->comm));
    } else {
      f.message = fmt::format(
          "the driver lists pid {} on GPU {} ({}) but no such process exists: its context "
          "outlives it",
          dead, l.device_index, memory);
    }
    // Likely inheritors: live holders that share the dead process's group or
    // session (children keep them after the parent dies), then holders of the
    // same device the driver does not list (fork-inherited descriptors).
    // A live process that took the PID owns the group and session of that
    // number now (the kernel reuses no PID still naming a group or session).
    const bool reused = now != nullptr && !now->zombie();
    std::set<pid_t> named;
    for (const auto& r : snap.records) {
      if (!holds_gpu(r) || r.process.zombie() || r.process.pid == snap.self_pid) continue;
      std::string reason;
      if (!reused && r.process.pgrp == dead) {
        reason = "same process group";
      } else if (!reused && r.process.session == dead) {
        reason = "same session";
      } else if (!r.listed()) {
        bool same_device = std::any_of(r.process.gpu_fds.begin(), r.process.gpu_fds.end(),
                                       [&](const proc::DeviceUse& d) {
                                         return d.device == device_name;
                                       });
        if (!same_device) continue;
        reason = fmt::format("holds {} and is not listed by the driver", device_name);
      } else {
        continue;
      }
      if (!named.insert(r.process.pid).second) continue;
      f.holders.push_back({r.process.pid, r.process.comm, reason});
    }
    if (f.holders.empty()) {
      f.message += "; no live process holds its descriptors";
      f.advice =
          "Nothing on the node holds it: if it persists, drain the node and reset the GPU "
          "(nvidia-smi --gpu-reset) or reboot.";
    } else {
      std::string names;
      for (const auto& h : f.holders) {
        if (!names.empty()) names += ", ";
        names += fmt::format("{} ({})", h.pid, h.comm);
      }
      f.message += fmt::format("; likely held by {}", names);
      f.advice =
          "End the holder(s) named here (or restart their pod): the memory is released when "
          "the last process holding the context's descriptors exits. Fix the code that forks "
          "after CUDA initialisation (use spawn, or close the descriptors in the child).";
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Finding> detect_hidden_holders(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> out;
  for (const auto& r : snap.records) {
    if (!holds_gpu(r) || r.listed() || r.process.pid == snap.self_pid) continue;
    const bool monitor = std::find(opt.monitor_comms.begin(), opt.monitor_comms.end(),
                                   r.process.comm) != opt.monitor_comms.end();
    Finding f;
    f.kind = Kind::hidden_holder;
    f.pid = r.process.pid;
    f.severity = (monitor || !holds_device_node(r)) ? Severity::info : Severity::warning;
    f.message = fmt::format("{} holds GPU descriptors ({}) but the driver does not list it",
                            describe(r), device_list(r));
    if (monitor) {
      f.advice = "A known GPU monitor (an NVML client holds descriptors without a context).";
    } else if (!holds_device_node(r)) {
      f.advice = "Holds only control nodes; usually harmless.";
    } else {
      f.advice =
          "It may keep another process's context alive (inherited descriptors) or be a driver "
          "client in another PID namespace; check what it is, and end it or its pod if it "
          "should not hold the GPU.";
    }
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Finding> detect_ghost_memory(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> out;
  for (const auto& d : snap.gpu.devices) {
    if (!d.memory || !d.processes.empty()) continue;
    // v1 "used" includes reserved memory (615 MiB on an idle H200): only v2 can tell.
    if (!d.memory->reserved) continue;
    if (d.memory->used < opt.ghost_threshold_bytes) continue;
    Finding f;
    f.kind = Kind::ghost_memory;
    f.severity = Severity::critical;
    f.device = d.index;
    f.message = fmt::format(
        "GPU {} ({}) has {} MiB used (reserved {} MiB not counted) and the driver lists no "
        "process",
        d.index, d.uuid, d.memory->used >> 20, *d.memory->reserved >> 20);
    f.advice =
        "Look for holders in other PID namespaces (run with hostPID) and hidden holders; if "
        "none, drain the node and reset the GPU (nvidia-smi --gpu-reset) or reboot.";
    out.push_back(std::move(f));
  }
  return out;
}

std::vector<Finding> detect_all(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> parts[] = {detect_orphaned_contexts(snap), detect_ghost_memory(snap, opt),
                                  detect_nccl_missing_ranks(snap), detect_zombies(snap),
                                  detect_orphans(snap),           detect_hidden_holders(snap, opt)};
  // One exact allocation: a node of thousands of hidden holders must not pay
  // for a doubling vector (most of trace's peak memory before this).
  std::size_t total = 0;
  for (const auto& p : parts) total += p.size();
  std::vector<Finding> all;
  all.reserve(total);
  for (auto& p : parts) {
    for (auto& f : p) all.push_back(std::move(f));
    std::vector<Finding>().swap(p);
  }
  return all;
}

bool fails_check(const std::vector<Finding>& findings) {
  return std::any_of(findings.begin(), findings.end(),
                     [](const Finding& f) { return f.severity != Severity::info; });
}

}  // namespace gpureap::findings
