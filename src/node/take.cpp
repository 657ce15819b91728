#include "node/take.hpp"

#include <unistd.h>

#include <algorithm>
#include <map>
#include <optional>
#include <string_view>

#include "container/cgroup_layouts.hpp"
#include "proc/file_identity.hpp"
#include "proc/scan.hpp"

namespace gpureap::node {

namespace {

void resolve_containers(NodeSnapshot& snap, const container::Resolvers& resolvers) {
  // Many processes share a container: resolve each container id once.
  std::map<std::string, std::shared_ptr<const container::ContainerInfo>> cache;
  // And one css_set's cgroup lines (the scan shares them: one object) name
  // one container: parsed once for a run of processes in it.
  const std::vector<proc::CgroupLine>* last_lines = nullptr;
  std::optional<container::ContainerRef> last_ref;
  for (auto& rec : snap.records) {
    const std::vector<proc::CgroupLine>& lines = rec.process.cgroups;
    if (&lines != last_lines) {
      last_ref = container::container_from_cgroups(lines);
      last_lines = &lines;
    }
    const auto& ref = last_ref;
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

bool holds_gpu(const ProcessRecord& r) {
  return !r.process.gpu_fds.empty();
}

// Where some GPU holder's open file descriptions are unknown (the /proc walk
// read it), number every holder's with kcmp, so all compare. Only when the
// driver lists a process: with none, no holder can share a listed context.
void identify_shared_files(NodeSnapshot& snap, const sys::HostRoot& root) {
  if (snap.listings.empty()) return;
  std::vector<proc::Process*> holders;
  bool unknown = false;
  for (auto& r : snap.records) {
    if (!holds_gpu(r) || r.process.zombie()) continue;
    holders.push_back(&r.process);
    unknown = unknown || r.process.gpu_files.empty();
  }
  if (!unknown) return;
  // On failure (another PID namespace, no kcmp, too many) the files stay as
  // they were: unknown ones count as no evidence either way.
  (void)proc::identify_files_by_kcmp(root, holders);
}

// The name a mapped file has among the GPU device nodes, if it is one.
std::optional<std::string> mapped_node(const std::string& path,
                                       const proc::DeviceMatcher& devices) {
  for (const auto& n : devices.nodes) {
    if (path == n.path) return n.name;
  }
  constexpr std::string_view kDev = "/dev/nvidia";
  if (path.compare(0, kDev.size(), kDev) == 0 && path.find('/', kDev.size()) == std::string::npos &&
      path.find(' ') == std::string::npos) {
    return path.substr(5);
  }
  return std::nullopt;
}

// What the unlisted holders of a GPU with a gone listing have mapped: whether
// each holds that context or is only a driver client (findings decide).
void read_context_mappings(NodeSnapshot& snap, const sys::HostRoot& root,
                           const proc::DeviceMatcher& devices) {
  std::vector<std::string> nodes;  // GPU nodes whose listed process is gone
  for (const auto& l : snap.listings) {
    if (names_gone_process(l.match)) nodes.push_back(snap.device_node_name(l.device_index));
  }
  if (nodes.empty()) return;
  for (auto& r : snap.records) {
    if (r.listed() || r.process.zombie() || r.process.pid == snap.self_pid) continue;
    const bool in_question = std::any_of(
        r.process.gpu_fds.begin(), r.process.gpu_fds.end(), [&](const proc::DeviceUse& d) {
          return std::find(nodes.begin(), nodes.end(), d.device) != nodes.end();
        });
    if (!in_question) continue;
    auto files = proc::read_mapped_files(root, r.process.pid);
    if (!files) continue;  // vanished or denied: no evidence either way
    std::vector<std::string> mapped;
    for (const auto& f : *files) {
      auto name = mapped_node(f, devices);
      if (name && std::find(mapped.begin(), mapped.end(), *name) == mapped.end()) {
        mapped.push_back(std::move(*name));
      }
    }
    r.gpu_mappings = std::move(mapped);
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
  scan_options.kernel_programs = options.kernel_programs;

  auto table = proc::scan_processes(root, scan_options);
  if (!table) return table.error();
  snap.scan_stats = table->stats;
  snap.records.reserve(table->processes.size());
  for (auto& p : table->processes) {
    ProcessRecord rec;
    rec.process = std::move(p);
    snap.records.push_back(std::move(rec));
  }
  // The moved-from table is as large as the records: not kept through the
  // rest of the snapshot, whose peak it would raise (the 10 MiB target).
  std::vector<proc::Process>().swap(table->processes);

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
  identify_shared_files(snap, root);
  read_context_mappings(snap, root, devices);
  resolve_containers(snap, resolvers);
  return snap;
}

}  // namespace gpureap::node
