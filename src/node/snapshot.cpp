#include "node/snapshot.hpp"

#include <algorithm>

namespace gpureap::node {

std::string_view to_string(PidMatch m) {
  switch (m) {
    case PidMatch::host: return "host";
    case PidMatch::thread: return "thread";
    case PidMatch::namespace_: return "namespace";
    case PidMatch::dead: return "dead";
    case PidMatch::stale: return "stale";
  }
  return "dead";
}

const ProcessRecord* NodeSnapshot::find(pid_t pid) const {
  auto it = std::lower_bound(records.begin(), records.end(), pid,
                             [](const ProcessRecord& r, pid_t p) { return r.process.pid < p; });
  if (it == records.end() || it->process.pid != pid) return nullptr;
  return &*it;
}

const proc::Process* NodeSnapshot::pid_now(const DriverListing& l) const {
  if (l.match != PidMatch::stale || !l.record) return nullptr;
  return &records[*l.record].process;
}

std::optional<std::uint64_t> NodeSnapshot::gpu_memory(const ProcessRecord& r) const {
  std::optional<std::uint64_t> total;
  for (std::size_t i : r.listings) {
    const auto& used = listings[i].entry.used_memory;
    if (used) total = total.value_or(0) + *used;
  }
  return total;
}

namespace {

bool same_container(const ProcessRecord& a, const ProcessRecord& b) {
  return a.container && b.container && a.container->ref.id == b.container->ref.id;
}

}  // namespace

const ProcessRecord* NodeSnapshot::container_init(const ProcessRecord& r) const {
  if (!r.container) return nullptr;
  for (const auto& other : records) {
    // Local PID 1 of a namespace that is deeper than the host's.
    if (other.process.nspid.size() >= 2 && other.process.local_pid() == 1 &&
        same_container(other, r)) {
      return &other;
    }
  }
  return nullptr;
}

std::string NodeSnapshot::device_node_name(unsigned index) const {
  for (const auto& d : gpu.devices) {
    if (d.index == index && d.minor) return "nvidia" + std::to_string(*d.minor);
  }
  return "nvidia" + std::to_string(index);
}

namespace {

// Index of the record with this pid, if any (records are sorted by pid).
std::optional<std::size_t> index_of(const NodeSnapshot& snap, pid_t pid) {
  const ProcessRecord* r = snap.find(pid);
  if (r == nullptr) return std::nullopt;
  return static_cast<std::size_t>(r - snap.records.data());
}

// The device node of a listing's GPU ("nvidia<minor>"), when the driver gave the minor.
std::optional<std::string> listing_node(const NodeSnapshot& snap, unsigned device_index) {
  for (const auto& d : snap.gpu.devices) {
    if (d.index == device_index && d.minor) return "nvidia" + std::to_string(*d.minor);
  }
  return std::nullopt;
}

// Whether `p` can hold a context on the GPU whose node is `node`: a context on
// GPU N lives in descriptors of /dev/nvidiaN, so a holder of another GPU's node
// only is not its owner (when the node is unknown, any GPU descriptor will do).
bool can_own(const proc::Process& p, const std::optional<std::string>& node) {
  if (!node) return !p.gpu_fds.empty();
  return std::any_of(p.gpu_fds.begin(), p.gpu_fds.end(), [&](const proc::DeviceUse& d) { return d.device == *node; });
}

// A container-local PID that names exactly one process holding the listing's
// GPU: the driver answered from inside a PID namespace (or a snapshot replayed
// from one). Two containers' workers often share a local PID; only one of them
// can hold this GPU's node, unless both do (then it is ambiguous).
std::optional<std::size_t> namespace_match(const NodeSnapshot& snap, pid_t pid,
                                           const std::optional<std::string>& node) {
  std::optional<std::size_t> found;
  for (std::size_t i = 0; i < snap.records.size(); ++i) {
    const auto& p = snap.records[i].process;
    if (p.nspid.size() < 2 || p.local_pid() != pid || !can_own(p, node)) continue;
    if (found) return std::nullopt;  // ambiguous: two containers use that local PID
    found = i;
  }
  return found;
}

}  // namespace

void match_listings(NodeSnapshot& snap, const ReadOne& read_one) {
  for (auto& rec : snap.records) rec.listings.clear();
  for (std::size_t li = 0; li < snap.listings.size(); ++li) {
    auto& listing = snap.listings[li];
    const auto pid = static_cast<pid_t>(listing.entry.pid);
    const auto node = listing_node(snap, listing.device_index);
    std::optional<std::size_t> idx = index_of(snap, pid);
    listing.match = PidMatch::host;
    // A host PID that does not hold this GPU while a container-local PID of the
    // same number does: the driver spoke in the container's namespace.
    if (idx && !can_own(snap.records[*idx].process, node)) {
      if (auto ns = namespace_match(snap, pid, node)) {
        idx = ns;
        listing.match = PidMatch::namespace_;
      }
    }
    if (!idx) {
      if (auto ns = namespace_match(snap, pid, node)) {
        idx = ns;
        listing.match = PidMatch::namespace_;
      }
    }
    if (!idx && read_one) {
      // Not a scanned process: a thread id (the driver may list one), or a
      // process that started after the scan.
      if (auto one = read_one(pid)) {
        if (one->tgid != pid) {
          idx = index_of(snap, one->tgid);
          listing.match = PidMatch::thread;
        } else {
          ProcessRecord late;
          late.process = std::move(*one);
          auto at = std::lower_bound(
              snap.records.begin(), snap.records.end(), pid,
              [](const ProcessRecord& r, pid_t p) { return r.process.pid < p; });
          auto pos = static_cast<std::size_t>(at - snap.records.begin());
          snap.records.insert(at, std::move(late));
          // Earlier listings pointing at or past `pos` shift by one.
          for (std::size_t k = 0; k < li; ++k) {
            if (snap.listings[k].record && *snap.listings[k].record >= pos) {
              ++*snap.listings[k].record;
            }
          }
          idx = pos;
          listing.match = PidMatch::host;
        }
      }
    }
    if (!idx) {
      listing.match = PidMatch::dead;
      listing.record.reset();
      continue;
    }
    listing.record = idx;
    // A context lives in its holders' descriptors: a process of that PID whose
    // table we read and found no descriptor of this GPU in cannot be its owner.
    const auto& p = snap.records[*idx].process;
    if (listing.match == PidMatch::host && snap.gpu_descriptors_visible && p.fds_readable &&
        !can_own(p, node)) {
      listing.match = PidMatch::stale;
    }
  }
  for (std::size_t li = 0; li < snap.listings.size(); ++li) {
    const auto& l = snap.listings[li];
    if (l.record && !names_gone_process(l.match)) snap.records[*l.record].listings.push_back(li);
  }
}

}  // namespace gpureap::node
