// Who holds a GPU context, from the evidence in the snapshot (docs/contexts.md):
// which open file descriptions of the device files processes share (the
// kernel's file objects, or kcmp), what they have mapped, and how they are
// related to a creator the driver lists. Orphaned and latent orphaned
// contexts, and whether an unlisted holder is only a driver client.
#include "findings/contexts.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "findings/finding.hpp"

namespace gpureap::findings {

namespace {

using node::NodeSnapshot;
using node::ProcessRecord;

bool holds_gpu(const ProcessRecord& r) {
  return !r.process.gpu_fds.empty();
}

bool holds_node(const ProcessRecord& r, const std::string& node) {
  return std::any_of(r.process.gpu_fds.begin(), r.process.gpu_fds.end(),
                     [&](const proc::DeviceUse& d) { return d.device == node; });
}

unsigned fds_on(const ProcessRecord& r, const std::string& node) {
  for (const auto& d : r.process.gpu_fds) {
    if (d.device == node) return d.count;
  }
  return 0;
}

// The open file descriptions of its GPU descriptors are known (empty: not).
bool files_known(const ProcessRecord& r) {
  return !r.process.gpu_files.empty();
}

// How many open file descriptions two processes share (sorted, unique lists).
std::size_t shared_files(const ProcessRecord& a, const ProcessRecord& b) {
  const auto& x = a.process.gpu_files;
  const auto& y = b.process.gpu_files;
  std::size_t n = 0;
  for (auto i = x.begin(), j = y.begin(); i != x.end() && j != y.end();) {
    if (*i < *j) {
      ++i;
    } else if (*j < *i) {
      ++j;
    } else {
      ++n;
      ++i;
      ++j;
    }
  }
  return n;
}

// A live process the driver lists as the owner of a context.
bool live_listed_holder(const ProcessRecord& r) {
  return r.listed() && !r.process.zombie() && holds_gpu(r);
}

// An unlisted live GPU holder other than ourselves: whose context is in question.
bool unlisted_holder(const NodeSnapshot& snap, const ProcessRecord& r) {
  return holds_gpu(r) && !r.listed() && !r.process.zombie() && r.process.pid != snap.self_pid;
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return fmt::format("{} {}", n, n == 1 ? one : many);
}

// Whether a mapped device node is the rule's entry `wanted`, for GPU `node`.
bool rule_entry_maps(const std::string& wanted, const std::string& mapped,
                     const std::string& node) {
  return wanted == mapped || (wanted == "nvidia#" && mapped == node);
}

}  // namespace

ContextEvidence::ContextEvidence(const NodeSnapshot& snap, const DetectOptions& opt)
    : snap_(snap), opt_(opt) {
  for (const auto& r : snap.records) {
    if (!live_listed_holder(r)) continue;
    listed_.push_back(&r);
    listed_files_unknown_ = listed_files_unknown_ || !files_known(r);
  }
  for (const auto& l : snap.listings) {
    if (node::names_gone_process(l.match)) gone_.push_back(&l);
  }
}

ListedSharing ContextEvidence::sharing_with_listed(const ProcessRecord& r) const {
  ListedSharing out;
  if (listed_.empty()) {
    out.shares = Tri::no;  // nothing listed: nothing to share
    return out;
  }
  if (files_known(r)) {
    for (const ProcessRecord* l : listed_) {
      if (l != &r && files_known(*l) && shared_files(*l, r) > 0) out.with.push_back(l);
    }
  }
  if (!out.with.empty()) {
    out.shares = Tri::yes;
  } else {
    out.shares = !files_known(r) || listed_files_unknown_ ? Tri::unknown : Tri::no;
  }
  return out;
}

namespace {

// Ties of `r` to the creator of `gone` that the process tree keeps: its group,
// its session, its parent while it is a zombie.
std::vector<std::string> kin_evidence(const NodeSnapshot& snap, const ProcessRecord& r,
                                      const node::DriverListing& gone) {
  const auto dead = static_cast<pid_t>(gone.entry.pid);
  const proc::Process* now = snap.pid_now(gone);
  // A live process that took the PID owns the group and session of that
  // number now (the kernel reuses no PID still naming a group or session).
  if (now != nullptr && !now->zombie()) return {};
  std::vector<std::string> evidence;
  if (r.process.pgrp == dead) {
    evidence.emplace_back("same process group");
  } else if (r.process.session == dead) {
    evidence.emplace_back("same session");
  }
  if (now != nullptr && r.process.ppid == dead) {
    evidence.push_back(fmt::format("child of the zombie {}", dead));
  }
  return evidence;
}

}  // namespace

std::optional<std::string> ContextEvidence::holder_evidence(const ProcessRecord& r,
                                                            const node::DriverListing& gone) const {
  const std::string node = snap_.device_node_name(gone.device_index);
  std::vector<std::string> evidence = kin_evidence(snap_, r, gone);
  if (r.listed()) {
    // It has a context of its own: named only when it is the creator's kin.
    if (evidence.empty()) return std::nullopt;
    return fmt::format("{}", fmt::join(evidence, "; "));
  }
  if (!holds_node(r, node) && evidence.empty()) return std::nullopt;
  if (evidence.empty()) {
    // Inherited from a live listed process: that creator's latent finding names it.
    if (sharing_with_listed(r).shares == Tri::yes) return std::nullopt;
    // Kin of another gone creator on this GPU: that one's holder, not this one's.
    for (const node::DriverListing* other : gone_) {
      if (other != &gone && snap_.device_node_name(other->device_index) == node &&
          !kin_evidence(snap_, r, *other).empty()) {
        return std::nullopt;
      }
    }
  }
  // Children of one creator share its open file descriptions among themselves.
  if (files_known(r)) {
    for (const auto& other : snap_.records) {
      if (&other == &r || !unlisted_holder(snap_, other) || !holds_node(other, node)) continue;
      if (const std::size_t n = shared_files(r, other); n > 0) {
        evidence.push_back(fmt::format("shares {} of its device files with pid {} ({})",
                                       plural(n, "open file description", "open file descriptions"),
                                       other.process.pid, other.process.comm));
        break;
      }
    }
  }
  // Each source the rule names that could be consulted: whether it showed a context.
  bool consulted = false;
  if (r.gpu_mappings && !opt_.context_evidence.mapped_nodes.empty()) {
    consulted = true;
    std::vector<std::string> shown;  // in the rule's order
    for (const auto& wanted : opt_.context_evidence.mapped_nodes) {
      for (const auto& m : *r.gpu_mappings) {
        if (rule_entry_maps(wanted, m, node) &&
            std::find(shown.begin(), shown.end(), m) == shown.end()) {
          shown.push_back(m);
        }
      }
    }
    if (!shown.empty()) evidence.push_back(fmt::format("maps {}", fmt::join(shown, ", ")));
  }
  if (opt_.context_evidence.min_gpu_node_fds > 0) {
    consulted = true;
    const unsigned n = fds_on(r, node);
    if (n >= opt_.context_evidence.min_gpu_node_fds) {
      evidence.push_back(fmt::format("holds {} descriptors of {}", n, node));
    }
  }
  if (!evidence.empty()) return fmt::format("{}", fmt::join(evidence, "; "));
  // What the rule consults shows no context, and nothing else ties it: a driver client.
  if (consulted) return std::nullopt;
  // Nothing learnt either way (mappings unread): named, as a holder of the node.
  return fmt::format("holds {} and is not listed by the driver", node);
}

bool ContextEvidence::driver_client(const ProcessRecord& r) const {
  // Only a live driver's listing says who has a context: a replay of another
  // machine, or no driver at all, proves nothing.
  if (!snap_.gpu_descriptors_visible || snap_.gpu.devices.empty()) return false;
  if (sharing_with_listed(r).shares != Tri::no) return false;
  return std::none_of(gone_.begin(), gone_.end(), [&](const node::DriverListing* l) {
    return holder_evidence(r, *l).has_value();
  });
}

std::vector<Finding> detect_orphaned_contexts(const NodeSnapshot& snap, const DetectOptions& opt) {
  std::vector<Finding> out;
  const ContextEvidence evidence(snap, opt);
  for (const auto& l : snap.listings) {
    if (!node::names_gone_process(l.match)) continue;
    const auto dead = static_cast<pid_t>(l.entry.pid);
    Finding f;
    f.kind = Kind::orphaned_context;
    f.severity = Severity::critical;
    f.pid = dead;
    f.device = l.device_index;
    f.bytes = l.entry.used_memory;
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
    // Its holders: live processes with evidence of holding this context (its
    // group or session, descriptions shared among its inheritors, mappings).
    std::set<pid_t> named;
    for (const auto& r : snap.records) {
      if (!holds_gpu(r) || r.process.zombie() || r.process.pid == snap.self_pid) continue;
      auto reason = evidence.holder_evidence(r, l);
      if (!reason || !named.insert(r.process.pid).second) continue;
      f.holders.push_back({r.process.pid, r.process.comm, std::move(*reason)});
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

std::vector<Finding> detect_latent_orphaned_contexts(const NodeSnapshot& snap) {
  std::vector<Finding> out;
  for (const auto& creator : snap.records) {
    if (!live_listed_holder(creator) || !files_known(creator) ||
        creator.process.pid == snap.self_pid) {
      continue;
    }
    Finding f;
    for (const auto& r : snap.records) {
      if (!unlisted_holder(snap, r) || !files_known(r)) continue;
      const std::size_t n = shared_files(creator, r);
      if (n == 0) continue;
      f.holders.push_back(
          {r.process.pid, r.process.comm,
           fmt::format("shares {} of its GPU device files with pid {} (inherited over fork)",
                       plural(n, "open file description", "open file descriptions"),
                       creator.process.pid)});
    }
    if (f.holders.empty()) continue;
    const auto& first = snap.listings[creator.listings.front()];
    f.kind = Kind::latent_orphaned_context;
    f.severity = Severity::warning;
    f.pid = creator.process.pid;
    f.device = first.device_index;
    const auto memory = snap.gpu_memory(creator);
    std::string names;
    for (const auto& h : f.holders) {
      if (!names.empty()) names += ", ";
      names += fmt::format("{} ({})", h.pid, h.comm);
    }
    f.message = fmt::format(
        "pid {} ({}) is listed on GPU {} ({}) and {} {} the same open descriptions of its GPU "
        "device files (inherited over fork): if pid {} exits, the context and its memory stay "
        "held by {}",
        creator.process.pid, creator.process.comm, first.device_index,
        memory ? fmt::format("{} MiB", *memory >> 20) : "memory n/a", names,
        f.holders.size() == 1 ? "holds" : "hold", creator.process.pid,
        f.holders.size() == 1 ? "it" : "them");
    f.advice =
        "Do not let children inherit the context: fork before CUDA initialisation, use the spawn "
        "start method, or have them exit with the creator (PR_SET_PDEATHSIG); ending the creator "
        "alone would leave an orphaned context.";
    out.push_back(std::move(f));
  }
  return out;
}

}  // namespace gpureap::findings
