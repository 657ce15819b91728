// gpureap observe: classification (pure) and rendering. See observe.hpp and docs/observe.md.
#include "observe/observe.hpp"

#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <map>
#include <set>

#include "gpu/snapshot_json.hpp"
#include "report/report.hpp"

namespace gpureap::observe {

namespace {

using findings::Finding;
using findings::Kind;
using findings::Severity;
using node::NodeSnapshot;
using node::PidMatch;
using node::ProcessRecord;
using nlohmann::json;

std::string_view basename_of(std::string_view path) {
  auto slash = path.rfind('/');
  return slash == std::string_view::npos ? path : path.substr(slash + 1);
}

std::string device_node(const NodeSnapshot& snap, unsigned index) {
  for (const auto& d : snap.gpu.devices) {
    if (d.index == index && d.minor) return fmt::format("nvidia{}", *d.minor);
  }
  return fmt::format("nvidia{}", index);
}

bool holds_node(const proc::Process& p, std::string_view node_name) {
  return std::any_of(p.gpu_fds.begin(), p.gpu_fds.end(),
                     [&](const proc::DeviceUse& d) { return d.device == node_name; });
}

// A GPU device node (nvidia0, nvidia1, …), not a control node (nvidiactl, nvidia-uvm).
bool is_gpu_node(std::string_view name) {
  return name.size() > 6 && name.substr(0, 6) == "nvidia" &&
         name.find_first_not_of("0123456789", 6) == std::string_view::npos;
}

bool live(const ProcessRecord& r) { return !r.process.zombie(); }

std::size_t index_of(const NodeSnapshot& snap, const ProcessRecord& r) {
  return static_cast<std::size_t>(&r - snap.records.data());
}

bool listed_on(const NodeSnapshot& snap, const ProcessRecord& r, unsigned device) {
  return std::any_of(r.listings.begin(), r.listings.end(),
                     [&](std::size_t li) { return snap.listings[li].device_index == device; });
}

std::string who(const ProcessRecord& r) { return fmt::format("{} ({})", r.process.pid, r.process.comm); }

ObserveFinding from_finding(const Finding& f) {
  ObserveFinding o;
  o.kind = std::string(findings::to_string(f.kind));
  o.severity = f.severity;
  o.pid = f.pid;
  o.device = f.device;
  o.message = f.message;
  // The detectors call a process outside any recognised container a "host
  // process"; from inside a container every process here is the container's.
  for (auto at = o.message.find(", host process"); at != std::string::npos;
       at = o.message.find(", host process", at)) {
    o.message.erase(at, std::string_view(", host process").size());
  }
  o.advice = f.advice;
  o.holders = f.holders;
  o.pids = f.pids;
  return o;
}

// --- [1] PID 1 ---------------------------------------------------------------

std::optional<Pid1Info> analyse_pid1(const NodeSnapshot& snap) {
  const ProcessRecord* r = snap.find(1);
  if (r == nullptr) return std::nullopt;
  return Pid1Info{index_of(snap, *r), known_init(r->process)};
}

// --- [4] orphans ---------------------------------------------------------------

// The kernel records no "forked by": what survives a dead parent is its session
// and process group. A child PID 1 started itself shares PID 1's session (and
// group, or leads its own); one adopted after its parent died often belongs to
// a session or group whose leader is gone (a leader outside this PID namespace
// shows as 0) and that is not PID 1's.
OrphanEntry classify_orphan(const NodeSnapshot& snap, const ProcessRecord& r) {
  OrphanEntry e;
  e.record = index_of(snap, r);
  const auto& p = r.process;
  const ProcessRecord* init = snap.find(1);
  auto leader_alive = [&](pid_t id) {
    const ProcessRecord* l = id > 0 ? snap.find(id) : nullptr;
    return l != nullptr && live(*l);
  };
  const bool init_session = init != nullptr && p.session == init->process.session;
  const bool init_group = init != nullptr && p.pgrp == init->process.pgrp;
  if (!init_session && !leader_alive(p.session)) {
    e.adopted = true;
    e.reason = p.session > 0 ? fmt::format("its session leader {} is gone", p.session)
                             : "its session leader is outside this PID namespace";
  } else if (!init_group && !leader_alive(p.pgrp)) {
    e.adopted = true;
    e.reason = p.pgrp > 0 ? fmt::format("its process-group leader {} is gone", p.pgrp)
                          : "its process-group leader is outside this PID namespace";
  } else {
    e.reason = "in PID 1's session, with live leaders: started by PID 1, or adopted (cannot tell)";
  }
  return e;
}

// --- [6]-[8] listings ------------------------------------------------------------

struct Evidence {
  // A listed PID resolved to a live local GPU holder: the driver numbers PIDs as
  // this namespace does (driver 580 inside `unshare --pid`).
  bool driver_speaks_local = false;
};

// A listing whose PID names a local process. False when the local process of
// that number holds no GPU descriptor at all (with readable fds): a host PID that
// happens to equal a local one.
bool credible_match(const NodeSnapshot& snap, const node::DriverListing& l) {
  if (node::names_gone_process(l.match) || !l.record) return false;
  const auto& p = snap.records[*l.record].process;
  if (!live(snap.records[*l.record])) return false;
  return !p.gpu_fds.empty() || !p.fds_readable;
}

ListedEntry classify_listing(const NodeSnapshot& snap, std::size_t li, const Evidence& ev) {
  const auto& l = snap.listings[li];
  ListedEntry e;
  e.listing = li;
  const auto pid = static_cast<pid_t>(l.entry.pid);
  if (credible_match(snap, l)) {
    const auto& r = snap.records[*l.record];
    e.record = l.record;
    switch (l.match) {
      case PidMatch::thread:
        e.status = ListedStatus::thread;
        e.reason = fmt::format("a thread of local pid {} ({})", r.process.pid, r.process.comm);
        break;
      case PidMatch::namespace_:
        e.status = ListedStatus::alive;
        e.reason = fmt::format("the inner-namespace pid of {}", who(r));
        break;
      default:
        e.status = ListedStatus::alive;
        e.reason = fmt::format("local process {}", who(r));
        break;
    }
    return e;
  }
  const std::string node_name = device_node(snap, l.device_index);
  // Local processes holding this GPU's node that the driver does not list on it.
  std::vector<const ProcessRecord*> unlisted;
  const ProcessRecord* inheritor = nullptr;  // its group or session leader was `pid`
  for (const auto& r : snap.records) {
    if (!live(r) || r.process.pid == snap.self_pid || !holds_node(r.process, node_name)) continue;
    if (listed_on(snap, r, l.device_index)) continue;
    unlisted.push_back(&r);
    if (inheritor == nullptr && (r.process.pgrp == pid || r.process.session == pid)) inheritor = &r;
  }
  const std::string here =
      l.record ? fmt::format("local pid {} is {} and holds no GPU descriptor", pid,
                             snap.records[*l.record].process.comm)
               : fmt::format("no process {} in this PID namespace", pid);
  if (inheritor != nullptr) {
    e.status = ListedStatus::dead;
    e.reason = fmt::format("{}; {} still holds {} and has it as its {} leader: an inherited context",
                           here, who(*inheritor), node_name,
                           inheritor->process.pgrp == pid ? "process-group" : "session");
  } else if (unlisted.empty()) {
    e.status = ListedStatus::dead;
    e.reason = fmt::format("{}, and no local process holds {}", here, node_name);
  } else if (ev.driver_speaks_local) {
    e.status = ListedStatus::dead;
    e.reason = fmt::format("{}; the driver lists other local processes by their local pid, so this "
                           "one is gone; {} local holder(s) of {} unlisted",
                           here, unlisted.size(), node_name);
  } else {
    e.status = ListedStatus::not_visible;
    e.reason = fmt::format("{}, but {} local process(es) hold {} unlisted: the driver most likely "
                           "reports a PID of another namespace (host PID)",
                           here, unlisted.size(), node_name);
  }
  return e;
}

void add_unique(std::vector<unsigned>& v, unsigned x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

}  // namespace

std::optional<std::string> known_init(const proc::Process& p) {
  for (auto name : kKnownInits) {
    if (p.comm == name) return std::string(name);
    if (!p.cmdline.empty() && basename_of(p.cmdline.front()) == name) return std::string(name);
  }
  return std::nullopt;
}

std::string_view to_string(ListedStatus s) {
  switch (s) {
    case ListedStatus::alive: return "alive";
    case ListedStatus::thread: return "thread";
    case ListedStatus::not_visible: return "not_visible";
    case ListedStatus::dead: return "dead";
  }
  return "dead";
}

std::string_view to_string(DriverPidView v) {
  switch (v) {
    case DriverPidView::none: return "none";
    case DriverPidView::local: return "local";
    case DriverPidView::host: return "host";
    case DriverPidView::unknown: return "unknown";
  }
  return "unknown";
}

bool ObserveReport::fails_check() const {
  return std::any_of(findings.begin(), findings.end(),
                     [](const ObserveFinding& f) { return f.severity != Severity::info; });
}

ObserveReport analyse_observe(const NodeSnapshot& snap, const std::vector<Finding>& grouped) {
  // Judged one by one from inside the namespace: what detect_all grouped under
  // a root cause (Finding::related) counts on its own here.
  std::vector<Finding> found;
  for (const auto& f : grouped) {
    found.push_back(f);
    found.back().related.clear();
    found.insert(found.end(), f.related.begin(), f.related.end());
  }
  ObserveReport rep;
  rep.pid1 = analyse_pid1(snap);

  // [3] zombies, [4] orphans.
  for (const auto& r : snap.records) {
    if (r.process.zombie()) {
      rep.zombies.push_back(index_of(snap, r));
    } else if (r.process.ppid == 1 && r.process.pid != 1) {
      rep.orphans.push_back(classify_orphan(snap, r));
    }
  }

  // [5] devices and [7] holders.
  for (const auto& d : snap.gpu.devices) {
    DeviceView v;
    v.index = d.index;
    v.node = device_node(snap, d.index);
    rep.devices.push_back(std::move(v));
  }
  for (const auto& l : snap.listings) {
    for (auto& v : rep.devices) {
      if (v.index == l.device_index) ++v.listed;
    }
  }
  for (const auto& r : snap.records) {
    if (r.process.gpu_fds.empty() || r.process.pid == snap.self_pid || !live(r)) continue;
    HolderEntry h;
    h.record = index_of(snap, r);
    for (std::size_t li : r.listings) add_unique(h.listed_on, snap.listings[li].device_index);
    for (auto& v : rep.devices) {
      if (!holds_node(r.process, v.node)) continue;
      ++v.local_holders;
      if (!listed_on(snap, r, v.index)) {
        ++v.unlisted_holders;
        add_unique(h.unlisted_on, v.index);
      }
    }
    // A GPU node held that no device of the snapshot names (the driver lists no
    // such GPU) still makes an unlisted holder.
    for (const auto& u : r.process.gpu_fds) {
      if (!is_gpu_node(u.device)) continue;
      const bool known = std::any_of(rep.devices.begin(), rep.devices.end(),
                                     [&](const DeviceView& v) { return v.node == u.device; });
      if (!known && r.listings.empty()) rep.context.unlisted_holders.push_back(r.process.pid);
    }
    if (!h.unlisted_on.empty()) rep.context.unlisted_holders.push_back(r.process.pid);
    rep.holders.push_back(std::move(h));
  }
  std::sort(rep.context.unlisted_holders.begin(), rep.context.unlisted_holders.end());
  rep.context.unlisted_holders.erase(
      std::unique(rep.context.unlisted_holders.begin(), rep.context.unlisted_holders.end()),
      rep.context.unlisted_holders.end());

  // [6] listings, [8-a].
  Evidence ev;
  for (const auto& l : snap.listings) {
    if (!credible_match(snap, l)) continue;
    const auto& p = snap.records[*l.record].process;
    if (!p.gpu_fds.empty() && p.pid != snap.self_pid) ev.driver_speaks_local = true;
  }
  for (std::size_t li = 0; li < snap.listings.size(); ++li) {
    rep.listed.push_back(classify_listing(snap, li, ev));
    switch (rep.listed.back().status) {
      case ListedStatus::alive: ++rep.context.alive; break;
      case ListedStatus::thread: ++rep.context.thread; break;
      case ListedStatus::not_visible: ++rep.context.not_visible; break;
      case ListedStatus::dead: ++rep.context.dead; break;
    }
  }
  auto& ctx = rep.context;
  if (snap.listings.empty()) {
    ctx.view = DriverPidView::none;
  } else if (ev.driver_speaks_local) {
    ctx.view = DriverPidView::local;
  } else if (ctx.not_visible > 0) {
    ctx.view = DriverPidView::host;
  } else {
    ctx.view = DriverPidView::unknown;
  }
  for (auto& v : rep.devices) {
    v.may_hide = v.listed < v.local_holders;
    ctx.may_hide = ctx.may_hide || v.may_hide;
  }

  // Findings: the detectors', judged again from inside the namespace, then observe's own.
  std::set<unsigned> explained_devices;  // devices with a not_visible listing
  for (const auto& e : rep.listed) {
    if (e.status == ListedStatus::not_visible) {
      explained_devices.insert(snap.listings[e.listing].device_index);
    }
  }
  for (const auto& f : found) {
    switch (f.kind) {
      case Kind::orphaned_context:
      case Kind::orphan:
        continue;  // re-derived below from this namespace's view
      case Kind::ghost_memory: {
        ObserveFinding o = from_finding(f);
        if (f.device) {
          add_unique(ctx.ghost_devices, *f.device);
          for (auto& v : rep.devices) v.ghost = v.ghost || v.index == *f.device;
        }
        const bool holders_here =
            f.device && std::any_of(rep.devices.begin(), rep.devices.end(), [&](const DeviceView& v) {
              return v.index == *f.device && v.local_holders > 0;
            });
        if (holders_here) {
          o.severity = Severity::info;
          o.message += "; local processes hold this GPU, so the driver most likely hides them from "
                       "this PID namespace";
          o.advice = "Run `gpureap trace` on the node (host PID namespace) to see every holder.";
        } else {
          o.severity = Severity::warning;
          o.message += " (judged from inside the container: processes of other PID namespaces are "
                       "not visible here)";
        }
        rep.findings.push_back(std::move(o));
        break;
      }
      case Kind::hidden_holder: {
        ObserveFinding o = from_finding(f);
        const ProcessRecord* r = f.pid ? snap.find(*f.pid) : nullptr;
        const HolderEntry* h = nullptr;
        for (const auto& x : rep.holders) {
          if (r != nullptr && x.record == index_of(snap, *r)) h = &x;
        }
        if (h != nullptr && !h->unlisted_on.empty() &&
            std::all_of(h->unlisted_on.begin(), h->unlisted_on.end(),
                        [&](unsigned d) { return explained_devices.count(d) > 0; })) {
          o.severity = Severity::info;
          o.message += "; the driver most likely lists it under its host PID";
          o.advice = "Run `gpureap trace` on the node to map host PIDs to this container.";
        } else if (h != nullptr && !ev.driver_speaks_local && !h->unlisted_on.empty() &&
                   std::all_of(h->unlisted_on.begin(), h->unlisted_on.end(), [&](unsigned d) {
                     return std::any_of(rep.devices.begin(), rep.devices.end(),
                                        [&](const DeviceView& v) { return v.index == d && v.may_hide; });
                   })) {
          o.severity = Severity::info;
          o.message += "; the driver lists no process of this PID namespace: it may hide them";
          o.advice = "Run `gpureap trace` on the node (host PID namespace) to see every holder.";
        }
        rep.findings.push_back(std::move(o));
        break;
      }
      default:
        rep.findings.push_back(from_finding(f));
        break;
    }
  }

  // Orphaned contexts: only the listings judged dead here.
  for (const auto& e : rep.listed) {
    if (e.status != ListedStatus::dead) continue;
    const auto& l = snap.listings[e.listing];
    const auto pid = static_cast<pid_t>(l.entry.pid);
    ObserveFinding o;
    o.kind = std::string(findings::to_string(Kind::orphaned_context));
    o.severity = Severity::critical;
    o.pid = pid;
    o.device = l.device_index;
    for (const auto& f : found) {
      if (f.kind == Kind::orphaned_context && f.pid == o.pid && f.device == o.device) {
        o = from_finding(f);
        break;
      }
    }
    if (o.message.empty()) {
      o.message = fmt::format("the driver lists pid {} on GPU {} ({}) but no such process exists",
                              pid, l.device_index,
                              l.entry.used_memory ? report::format_bytes(*l.entry.used_memory) : "memory n/a");
      o.advice = "End whatever still holds its descriptors (or restart the pod); if nothing does, "
                 "drain the node and reset the GPU.";
    }
    o.message += fmt::format(" [{}; judged from inside the container]", e.reason);
    rep.findings.push_back(std::move(o));
  }

  // Adopted orphans.
  for (const auto& e : rep.orphans) {
    if (!e.adopted) continue;
    const auto& r = snap.records[e.record];
    ObserveFinding o;
    o.kind = std::string(findings::to_string(Kind::orphan));
    o.severity = Severity::warning;
    o.pid = r.process.pid;
    o.message = fmt::format("{} is an orphan: reparented to PID 1 ({})", who(r), e.reason);
    if (!r.process.gpu_fds.empty()) o.message += "; it holds GPU descriptors";
    o.advice = "Make the parent wait for its workers and stop them on exit; run an init as PID 1 "
               "(gpureap-init) so orphans are reaped and signalled at shutdown.";
    rep.findings.push_back(std::move(o));
  }

  // PID 1.
  {
    ObserveFinding o;
    o.kind = "pid1_not_init";
    o.pid = 1;
    const bool to_reap =
        !rep.zombies.empty() ||
        std::any_of(rep.orphans.begin(), rep.orphans.end(), [](const OrphanEntry& x) { return x.adopted; });
    if (!rep.pid1) {
      o.severity = Severity::info;
      o.message = fmt::format("no PID 1 under {}/proc: cannot tell which init runs", snap.host_root);
      rep.findings.push_back(std::move(o));
    } else if (!rep.pid1->init) {
      const auto& p = snap.records[rep.pid1->record].process;
      o.severity = to_reap ? Severity::warning : Severity::info;
      o.message = fmt::format("PID 1 is {}, not an init: zombies will not be reaped", p.comm);
      if (to_reap) o.message += " (zombies or orphans are present now)";
      o.advice = "Run an init as PID 1: gpureap-init (or tini, `docker run --init`), which reaps "
                 "zombies and forwards SIGTERM.";
      rep.findings.push_back(std::move(o));
    }
  }

  // What the driver's PIDs mean here.
  if (ctx.not_visible > 0) {
    ObserveFinding o;
    o.kind = "driver_host_pids";
    o.severity = Severity::info;
    o.message = fmt::format(
        "driver reports PIDs outside this PID namespace (host PIDs): {} listed, {} local holders "
        "unlisted — run `gpureap trace` on the node to map them",
        ctx.not_visible, ctx.unlisted_holders.size());
    o.advice = "Not an orphaned context: these PIDs cannot be checked from inside the container.";
    rep.findings.push_back(std::move(o));
  }
  for (const auto& v : rep.devices) {
    if (!v.may_hide) continue;
    ObserveFinding o;
    o.kind = "driver_may_hide";
    o.severity = Severity::info;
    o.device = v.index;
    o.message = fmt::format(
        "the driver lists {} process(es) on GPU {} but {} local process(es) hold {}: the driver may "
        "hide processes from this namespace (NVML omits what it cannot see since 535.113), or they "
        "hold inherited descriptors",
        v.listed, v.index, v.local_holders, v.node);
    o.advice = "Run `gpureap trace` on the node (host PID namespace) for the full picture.";
    rep.findings.push_back(std::move(o));
  }

  // The verdict.
  if (ctx.dead > 0) {
    ctx.verdict.push_back(fmt::format(
        "ORPHANED GPU CONTEXT: {} listed PID(s) belong to no live process (judged from inside the "
        "container)",
        ctx.dead));
  }
  if (ctx.not_visible > 0) {
    ctx.verdict.push_back(fmt::format(
        "driver reports PIDs outside this PID namespace (host PIDs): {} listed, {} local holders "
        "unlisted — run `gpureap trace` on the node to map them",
        ctx.not_visible, ctx.unlisted_holders.size()));
  }
  if (ctx.may_hide) {
    ctx.verdict.push_back("fewer listed processes than local holders: the driver may hide processes "
                          "from this namespace, or they hold inherited descriptors");
  }
  if (!ctx.ghost_devices.empty()) {
    ctx.verdict.push_back(fmt::format("ghost memory on {} GPU(s): used with no listed process",
                                      ctx.ghost_devices.size()));
  }
  if (ctx.verdict.empty()) {
    ctx.verdict.push_back(snap.listings.empty() ? "no GPU process listed; no orphaned context"
                                                : "every listed PID is alive here; no orphaned context");
  }
  return rep;
}

// --- rendering -------------------------------------------------------------------

namespace {

std::string devices_held(const proc::Process& p) {
  std::string s;
  for (const auto& d : p.gpu_fds) {
    if (!s.empty()) s += ", ";
    s += fmt::format("{}×{}", d.device, d.count);
  }
  return s;
}

void render_tree(const NodeSnapshot& snap, std::string& out) {
  std::map<pid_t, std::vector<std::size_t>> children;
  std::vector<std::size_t> roots;
  for (std::size_t i = 0; i < snap.records.size(); ++i) {
    const auto& p = snap.records[i].process;
    if (p.pid != 1 && p.ppid > 0 && snap.find(p.ppid) != nullptr) {
      children[p.ppid].push_back(i);
    } else {
      roots.push_back(i);
    }
  }
  // Iterative depth-first walk (a deep chain must not overflow the stack).
  std::vector<std::pair<std::size_t, unsigned>> stack;
  for (auto it = roots.rbegin(); it != roots.rend(); ++it) stack.emplace_back(*it, 0U);
  std::set<pid_t> seen;
  while (!stack.empty()) {
    auto [i, depth] = stack.back();
    stack.pop_back();
    const auto& r = snap.records[i];
    if (!seen.insert(r.process.pid).second) continue;
    std::string cmd = r.process.command_line();
    if (cmd.size() > 100) cmd = cmd.substr(0, 97) + "...";
    out += fmt::format("  {}{:<6} {} {}{}\n", std::string(2 * std::size_t{depth}, ' '), r.process.pid, r.process.state,
                       cmd, r.process.pid == snap.self_pid ? "   (this check)" : "");
    auto c = children.find(r.process.pid);
    if (c == children.end()) continue;
    for (auto it = c->second.rbegin(); it != c->second.rend(); ++it) stack.emplace_back(*it, depth + 1);
  }
}

}  // namespace

std::string render_observe(const NodeSnapshot& snap, const ObserveReport& rep) {
  std::string out;
  out += fmt::format("gpureap observe: in-container check (proc under {}, gpu backend {}{})\n\n",
                     snap.host_root, snap.gpu_backend,
                     snap.gpu.driver_version.empty() ? "" : ", driver " + snap.gpu.driver_version);

  out += "[1] PID 1\n";
  if (!rep.pid1) {
    out += "  not visible: no /proc/1\n";
  } else {
    const auto& p = snap.records[rep.pid1->record].process;
    out += fmt::format("  cmdline: {}\n", p.command_line());
    out += rep.pid1->init ? fmt::format("  is an init: {}\n", *rep.pid1->init)
                          : fmt::format("  PID 1 is {}, not an init: zombies will not be reaped\n", p.comm);
  }

  out += fmt::format("\n[2] Process tree ({} processes)\n", snap.records.size());
  render_tree(snap, out);

  out += "\n[3] Zombies\n";
  if (rep.zombies.empty()) out += "  none\n";
  for (std::size_t i : rep.zombies) {
    const auto& p = snap.records[i].process;
    const ProcessRecord* parent = snap.find(p.ppid);
    out += fmt::format("  {} ({}) zombie, parent {}{}\n", p.pid, p.comm, p.ppid,
                       parent ? fmt::format(" ({})", parent->process.comm) : "");
  }

  out += "\n[4] Orphans (PPID=1, not PID 1)\n";
  if (rep.orphans.empty()) out += "  none\n";
  for (const auto& e : rep.orphans) {
    const auto& p = snap.records[e.record].process;
    out += fmt::format("  {} ({}) {}: {}\n", p.pid, p.comm, e.adopted ? "ORPHAN" : "child of PID 1",
                       e.reason);
  }

  out += "\n[5] GPU memory per device\n";
  if (snap.gpu.devices.empty()) {
    out += fmt::format("  none: {}\n", snap.gpu_unavailable_reason.empty() ? "the backend reports no devices"
                                                                            : snap.gpu_unavailable_reason);
  }
  for (const auto& d : snap.gpu.devices) {
    std::string mem = "memory n/a";
    if (d.memory) {
      mem = fmt::format("{} / {} used", report::format_bytes(d.memory->used), report::format_bytes(d.memory->total));
      mem += d.memory->reserved ? fmt::format(" (+{} reserved)", report::format_bytes(*d.memory->reserved))
                                : " (v1 accounting: includes reserved)";
    }
    const DeviceView* v = nullptr;
    for (const auto& x : rep.devices) {
      if (x.index == d.index) v = &x;
    }
    out += fmt::format("  [{}] {} {}  {}  listed {}, local holders {}\n", d.index, d.name, d.uuid, mem,
                       v ? v->listed : 0U, v ? v->local_holders : 0U);
  }

  out += "\n[6] Driver-listed GPU processes\n";
  if (rep.listed.empty()) out += "  none\n";
  for (const auto& e : rep.listed) {
    const auto& l = snap.listings[e.listing];
    out += fmt::format("  gpu {}  pid {:<8} {:>10}  {:<11}  {}\n", l.device_index, l.entry.pid,
                       l.entry.used_memory ? report::format_bytes(*l.entry.used_memory) : "n/a",
                       to_string(e.status), e.reason);
  }

  out += "\n[7] Processes holding /dev/nvidia* descriptors\n";
  if (rep.holders.empty()) out += "  none\n";
  for (const auto& h : rep.holders) {
    const auto& p = snap.records[h.record].process;
    std::string listed = "not listed";
    if (!h.listed_on.empty()) {
      listed = "listed on gpu";
      for (unsigned d : h.listed_on) listed += fmt::format(" {}", d);
    }
    out += fmt::format("  {} ({})  {}  {}\n", p.pid, p.comm, devices_held(p), listed);
  }

  const auto& c = rep.context;
  out += "\n[8] Orphaned-context summary (judged from inside the container)\n";
  out += fmt::format("  8-a listed PIDs: {} alive, {} thread, {} not visible here, {} dead; driver PID "
                     "view: {}\n",
                     c.alive, c.thread, c.not_visible, c.dead, to_string(c.view));
  std::string unlisted;
  for (pid_t pid : c.unlisted_holders) {
    const ProcessRecord* r = snap.find(pid);
    unlisted += fmt::format("{}{}{}", unlisted.empty() ? "" : ", ", pid,
                            r ? fmt::format(" ({})", r->process.comm) : "");
  }
  out += fmt::format("  8-b holders not listed by the driver: {}\n", unlisted.empty() ? "none" : unlisted);
  std::string ghosts;
  for (unsigned d : c.ghost_devices) ghosts += fmt::format("{}gpu {}", ghosts.empty() ? "" : ", ", d);
  out += fmt::format("  8-c ghost memory: {}\n", ghosts.empty() ? "none" : ghosts);
  for (const auto& v : c.verdict) out += fmt::format("  => {}\n", v);

  out += "\nFindings:\n";
  if (rep.findings.empty()) out += "  none\n";
  for (const auto& f : rep.findings) {
    out += fmt::format("  [{}] {}: {}\n", findings::to_string(f.severity), f.kind, f.message);
    if (!f.advice.empty()) out += fmt::format("      advice: {}\n", f.advice);
  }
  out += fmt::format("\nResult: {}\n", rep.fails_check() ? "findings (exit 1)" : "clean (exit 0)");
  return out;
}

namespace {

json nullable(const std::optional<std::uint64_t>& v) { return v ? json(*v) : json(nullptr); }

json devices_json(const proc::Process& p) {
  json d = json::object();
  for (const auto& u : p.gpu_fds) d[u.device] = u.count;
  return d;
}

json process_brief(const proc::Process& p) {
  return {{"pid", p.pid}, {"ppid", p.ppid}, {"comm", p.comm}};
}

}  // namespace

json observe_json(const NodeSnapshot& snap, const ObserveReport& rep) {
  json doc;
  doc["schema"] = kObserveSchema;
  doc["taken_at"] = fmt::format("{:%Y-%m-%dT%H:%M:%S}Z", fmt::gmtime(std::chrono::system_clock::to_time_t(snap.taken_at)));
  doc["host_root"] = snap.host_root;
  doc["self_pid"] = snap.self_pid;

  if (rep.pid1) {
    const auto& p = snap.records[rep.pid1->record].process;
    doc["pid1"] = {{"pid", p.pid},
                   {"comm", p.comm},
                   {"cmdline", p.cmdline},
                   {"state", std::string(1, p.state)},
                   {"is_init", rep.pid1->init.has_value()},
                   {"init", rep.pid1->init ? json(*rep.pid1->init) : json(nullptr)}};
  } else {
    doc["pid1"] = nullptr;
  }

  json processes = json::array();
  for (const auto& r : snap.records) {
    const auto& p = r.process;
    processes.push_back({{"pid", p.pid},
                         {"ppid", p.ppid},
                         {"pgid", p.pgrp},
                         {"sid", p.session},
                         {"state", std::string(1, p.state)},
                         {"comm", p.comm},
                         {"cmdline", p.cmdline},
                         {"nspid", p.nspid},
                         {"devices", devices_json(p)},
                         {"listed", r.listed()},
                         {"self", p.pid == snap.self_pid}});
  }
  doc["processes"] = std::move(processes);

  json zombies = json::array();
  for (std::size_t i : rep.zombies) zombies.push_back(process_brief(snap.records[i].process));
  doc["zombies"] = std::move(zombies);

  json orphans = json::array();
  for (const auto& e : rep.orphans) {
    const auto& p = snap.records[e.record].process;
    json o = process_brief(p);
    o["pgid"] = p.pgrp;
    o["sid"] = p.session;
    o["adopted"] = e.adopted;
    o["reason"] = e.reason;
    orphans.push_back(std::move(o));
  }
  doc["orphans"] = std::move(orphans);

  json gpu = gpu::snapshot_to_json(snap.gpu);
  gpu["backend"] = snap.gpu_backend;
  gpu["unavailable_reason"] =
      snap.gpu_unavailable_reason.empty() ? json(nullptr) : json(snap.gpu_unavailable_reason);
  if (gpu.contains("devices")) {
    for (auto& d : gpu["devices"]) {
      for (const auto& v : rep.devices) {
        if (d.value("index", 0U) != v.index) continue;
        d["node"] = v.node;
        d["listed"] = v.listed;
        d["local_holders"] = v.local_holders;
        d["unlisted_holders"] = v.unlisted_holders;
        d["may_hide"] = v.may_hide;
        d["ghost"] = v.ghost;
      }
    }
  }
  doc["gpu"] = std::move(gpu);

  json listed = json::array();
  for (const auto& e : rep.listed) {
    const auto& l = snap.listings[e.listing];
    json o = {{"device", l.device_index},
              {"pid", l.entry.pid},
              {"used_memory", nullable(l.entry.used_memory)},
              {"status", to_string(e.status)},
              {"pid_match", node::to_string(l.match)},
              {"local_pid", nullptr},
              {"comm", nullptr},
              {"reason", e.reason}};
    if (e.record) {
      o["local_pid"] = snap.records[*e.record].process.pid;
      o["comm"] = snap.records[*e.record].process.comm;
    }
    listed.push_back(std::move(o));
  }
  doc["listed"] = std::move(listed);

  json holders = json::array();
  for (const auto& h : rep.holders) {
    const auto& p = snap.records[h.record].process;
    holders.push_back({{"pid", p.pid},
                       {"comm", p.comm},
                       {"devices", devices_json(p)},
                       {"listed_on", h.listed_on},
                       {"unlisted_on", h.unlisted_on}});
  }
  doc["holders"] = std::move(holders);

  const auto& c = rep.context;
  doc["orphaned_context"] = {{"alive", c.alive},
                             {"thread", c.thread},
                             {"not_visible", c.not_visible},
                             {"dead", c.dead},
                             {"driver_pid_view", to_string(c.view)},
                             {"driver_may_hide", c.may_hide},
                             {"unlisted_holders", c.unlisted_holders},
                             {"ghost_memory_devices", c.ghost_devices},
                             {"judged_from_inside", true},
                             {"verdict", c.verdict}};

  json fs = json::array();
  for (const auto& f : rep.findings) {
    json holders_json = json::array();
    for (const auto& h : f.holders) holders_json.push_back({{"pid", h.pid}, {"comm", h.comm}, {"reason", h.reason}});
    fs.push_back({{"kind", f.kind},
                  {"severity", findings::to_string(f.severity)},
                  {"pid", f.pid ? json(*f.pid) : json(nullptr)},
                  {"device", f.device ? json(*f.device) : json(nullptr)},
                  {"message", f.message},
                  {"advice", f.advice},
                  {"holders", holders_json},
                  {"pids", f.pids}});
  }
  doc["findings"] = std::move(fs);
  doc["scan"] = {{"processes", snap.records.size()},
                 {"vanished", snap.scan_stats.vanished},
                 {"denied", snap.scan_stats.denied},
                 {"malformed", snap.scan_stats.malformed}};
  doc["result"] = rep.fails_check() ? "findings" : "clean";
  return doc;
}

}  // namespace gpureap::observe
