// Taking a NodeSnapshot: the only place in the pipeline that reads sources.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "container/pod_resolver.hpp"
#include "gpu/backend.hpp"
#include "node/snapshot.hpp"
#include "proc/scan.hpp"
#include "sys/error.hpp"
#include "sys/host_root.hpp"

namespace gpureap::node {

struct SnapshotOptions {
  unsigned threads = 1;                // process scan workers
  std::vector<std::string> env_keys;   // environ keys to keep (e.g. torch.distributed's)
  proc::FdSource fd_source = proc::FdSource::automatic;
  // Where the scan keeps its BPF programs between snapshots (a caller that
  // takes many: the exporter); nullptr: loaded for each snapshot.
  proc::KernelPrograms* kernel_programs = nullptr;
};

// Scans processes, reads the GPU backend, matches the driver's PIDs, resolves
// containers and pods. Fails only when /proc or the GPU backend cannot be read at all.
sys::Result<NodeSnapshot> take_snapshot(const sys::HostRoot& root, gpu::GpuBackend& backend,
                                        const container::Resolvers& resolvers,
                                        const SnapshotOptions& options);

}  // namespace gpureap::node
