#include "node/take.hpp"

#include <unistd.h>

#include <map>

#include "container/cgroup_layouts.hpp"
#include "proc/scan.hpp"

namespace gpureap::node {

namespace {

void resolve_containers(NodeSnapshot& snap, const container::Resolvers& resolvers) {
  // Many processes share a container: resolve each container id once.
  std::map<std::string, std::shared_ptr<const container::ContainerInfo>> cache;
  for (auto& rec : snap.records) {
    auto ref = container::container_from_cgroups(rec.process.cgroups);
    if (!ref) continue;
    auto it = cache.find(ref->id);
    if (it == cache.end()) {
      it = cache.emplace(ref->id, std::make_shared<const container::ContainerInfo>(
                                      container::resolve_container(*ref, resolvers)))
               .first;
    }
    rec.container = it->second;
  }
}

}  // namespace

sys::Result<NodeSnapshot> take_snapshot(const sys::HostRoot& root, gpu::GpuBackend& backend,
                                        const container::Resolvers& resolvers,
                                        const SnapshotOptions& options) {
  NodeSnapshot snap;
  snap.taken_at = std::chrono::system_clock::now();
  snap.host_root = root.path();
  snap.self_pid = ::getpid();
  snap.gpu_backend = std::string(backend.name());

  const proc::DeviceMatcher devices = backend.device_matcher();
  proc::ScanOptions scan_options;
  scan_options.devices = &devices;
  scan_options.env_keys = options.env_keys;
  scan_options.threads = options.threads;
  scan_options.fd_source = options.fd_source;

  auto table = proc::scan_processes(root, scan_options);
  if (!table) return table.error();
  snap.scan_stats = table->stats;
  snap.records.reserve(table->processes.size());
  for (auto& p : table->processes) {
    ProcessRecord rec;
    rec.process = std::move(p);
    snap.records.push_back(std::move(rec));
  }

  auto gpu = backend.snapshot();
  if (!gpu) return gpu.error();
  snap.gpu = std::move(gpu.value());
  snap.gpu_unavailable_reason = backend.unavailable_reason();
  for (const auto& dev : snap.gpu.devices) {
    for (const auto& p : dev.processes) {
      DriverListing listing;
      listing.device_index = dev.index;
      listing.entry = p;
      snap.listings.push_back(listing);
    }
  }

  snap.gpu_descriptors_visible = !devices.empty() && backend.listed_processes_hold_descriptors();
  match_listings(snap, [&](pid_t pid) -> std::optional<proc::Process> {
    auto one = proc::read_process(root, pid, scan_options);
    if (!one) return std::nullopt;
    return std::move(one.value());
  });
  resolve_containers(snap, resolvers);
  return snap;
}

}  // namespace gpureap::node
