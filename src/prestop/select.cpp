#include "prestop/select.hpp"

#include <algorithm>

namespace gpureap::prestop {

std::string_view to_string(SkipReason r) {
  switch (r) {
    case SkipReason::self: return "self";
    case SkipReason::pid1: return "pid1";
    case SkipReason::zombie: return "zombie";
    case SkipReason::other_pid_namespace: return "other_pid_namespace";
    case SkipReason::pid_namespace_unreadable: return "pid_namespace_unreadable";
    case SkipReason::other_container: return "other_container";
    case SkipReason::not_a_process_here: return "not_a_process_here";
    case SkipReason::no_gpu_descriptor: return "no_gpu_descriptor";
  }
  return "self";
}

std::string describe(const Skipped& s) {
  const std::string who = s.pid ? "pid " + std::to_string(*s.pid) + " (" + s.comm + ")" : std::string();
  const std::string drv = s.driver_pid ? std::to_string(*s.driver_pid) : std::string("?");
  switch (s.reason) {
    case SkipReason::self: return who + ": this hook itself: not signalled";
    case SkipReason::pid1:
      return who + ": uses the GPU but is PID 1, which the runtime signals itself: not signalled "
                   "(--include-pid1 to include it)";
    case SkipReason::zombie: return who + ": zombie, holds nothing: not signalled";
    case SkipReason::other_pid_namespace:
      return who + ": uses the GPU but is not in this PID namespace: not signalled";
    case SkipReason::pid_namespace_unreadable:
      return who + ": uses the GPU but its PID namespace cannot be read (not identified): not signalled";
    case SkipReason::other_container:
      return who + ": uses the GPU but belongs to another container: not signalled";
    case SkipReason::not_a_process_here:
      return "driver pid " + drv + " is not a process of this container (host PID?): not signalled";
    case SkipReason::no_gpu_descriptor:
      return "driver pid " + drv + " names " + who +
             " here, which holds no GPU descriptor (host PID?): not signalled";
  }
  return who;
}

namespace {

template <class T>
void add_unique(std::vector<T>& v, T x) {
  if (std::find(v.begin(), v.end(), x) == v.end()) v.push_back(x);
}

}  // namespace

Selection select_targets(const node::NodeSnapshot& snap, const SelfIdentity& self,
                         const PidNamespaceOf& pid_namespace_of, const SelectOptions& options) {
  Selection out;
  // Listings that name no process here: a host PID seen from inside a container,
  // or a dead creator whose context someone else holds (that holder is found by
  // its descriptors). Either way there is nothing here to signal under that number.
  // A listed PID whose process here holds no GPU descriptor is not signalled either.
  for (const auto& l : snap.listings) {
    if (!node::names_gone_process(l.match)) continue;
    Skipped s;
    s.driver_pid = l.entry.pid;
    s.reason = SkipReason::not_a_process_here;
    if (const proc::Process* now = snap.pid_now(l)) {
      s.reason = SkipReason::no_gpu_descriptor;
      s.pid = now->pid;
      s.comm = now->comm;
    }
    out.skipped.push_back(std::move(s));
  }

  for (const auto& rec : snap.records) {
    const auto& p = rec.process;
    const bool holds = p.gpu_fd_total() > 0;
    if (!holds && !rec.listed()) continue;  // not a GPU user
    auto skip = [&](SkipReason reason, std::optional<std::uint32_t> driver_pid = std::nullopt) {
      Skipped s;
      s.pid = p.pid;
      s.driver_pid = driver_pid;
      s.comm = p.comm;
      s.reason = reason;
      out.skipped.push_back(std::move(s));
    };
    if (p.pid == self.pid) {
      skip(SkipReason::self);
      continue;
    }
    if (p.zombie()) {
      skip(SkipReason::zombie);
      continue;
    }
    const auto ns = pid_namespace_of ? pid_namespace_of(p.pid) : std::nullopt;
    if (!ns) {
      skip(SkipReason::pid_namespace_unreadable);
      continue;
    }
    if (*ns != self.pid_namespace) {
      skip(SkipReason::other_pid_namespace);
      continue;
    }
    if (self.container_id && (!rec.container || rec.container->ref.id != *self.container_id)) {
      skip(SkipReason::other_container);
      continue;
    }
    if (!holds) {
      // Listed by the driver, yet no GPU descriptor here (or none we can see):
      // the number is not positively a GPU user of ours.
      for (std::size_t li : rec.listings) skip(SkipReason::no_gpu_descriptor, snap.listings[li].entry.pid);
      continue;
    }
    if (p.pid == 1 && !options.include_pid1) {
      skip(SkipReason::pid1);
      continue;
    }
    Target t;
    t.pid = p.pid;
    t.start_time = p.start_time;
    t.comm = p.comm;
    t.gpu_fds = p.gpu_fd_total();
    for (std::size_t li : rec.listings) {
      add_unique(t.driver_pids, snap.listings[li].entry.pid);
      add_unique(t.devices, snap.listings[li].device_index);
    }
    t.gpu_memory = snap.gpu_memory(rec);
    out.targets.push_back(std::move(t));
  }
  return out;
}

}  // namespace gpureap::prestop
