// Hand-built NodeSnapshots for the unit tests of detectors, observe and
// renderers: processes, containers, GPUs and driver listings put together as a
// node situation, then matched by the real match_listings.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "container/container_ref.hpp"
#include "node/snapshot.hpp"

namespace gpureap::test {

inline constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;
inline constexpr std::uint64_t kGiB = 1024ULL * kMiB;

// A live process leading its own group and session, seen at one PID level.
inline proc::Process make_process(pid_t pid, pid_t ppid, const char* comm, char state = 'S') {
  proc::Process p;
  p.pid = p.tgid = pid;
  p.ppid = ppid;
  p.pgrp = p.session = pid;
  p.comm = comm;
  p.state = state;
  p.nspid = {pid};
  return p;
}

// A containerd container of a burstable pod in namespace "ns" unless told otherwise.
inline container::ContainerInfo pod_container(std::string id, std::string pod,
                                              std::string uid = "11111111-2222-3333-4444-555555555555",
                                              std::string pod_namespace = "ns",
                                              container::Qos qos = container::Qos::burstable,
                                              std::string container_name = "worker") {
  container::ContainerInfo c;
  c.ref.id = std::move(id);
  c.ref.runtime = container::Runtime::containerd;
  c.ref.pod_uid = uid;
  c.ref.qos = qos;
  c.meta = container::PodMeta{std::move(pod), std::move(pod_namespace), std::move(uid),
                              std::move(container_name), "containerd"};
  return c;
}

class SnapshotBuilder {
 public:
  // As on a GPU node: the scan could see device descriptors.
  SnapshotBuilder() { snap_.gpu_descriptors_visible = true; }
  node::ProcessRecord& add(proc::Process p, std::optional<container::ContainerInfo> c = std::nullopt) {
    node::ProcessRecord r;
    r.process = std::move(p);
    if (c) r.container = std::make_shared<const container::ContainerInfo>(std::move(*c));
    snap_.records.push_back(std::move(r));
    return snap_.records.back();
  }
  // An 80 GiB device; `reserved` nullopt stands for v1 memory accounting.
  gpu::GpuDevice& device(unsigned index, std::uint64_t used, std::optional<std::uint64_t> reserved = 0) {
    gpu::GpuDevice d;
    d.index = index;
    d.minor = index;
    d.uuid = "GPU-" + std::to_string(index);
    d.name = "Test GPU";
    d.memory = gpu::GpuMemory{80 * kGiB, used, reserved};
    snap_.gpu.devices.push_back(d);
    return snap_.gpu.devices.back();
  }
  // The driver lists `pid` on `device` with `bytes` (nullopt: it gave no number).
  void list(unsigned device, std::uint32_t pid, std::optional<std::uint64_t> bytes) {
    for (auto& d : snap_.gpu.devices) {
      if (d.index == device) d.processes.push_back({pid, bytes});
    }
    node::DriverListing l;
    l.device_index = device;
    l.entry = {pid, bytes};
    snap_.listings.push_back(l);
  }
  node::NodeSnapshot& snapshot() { return snap_; }
  // Records in pid order, then the driver's PIDs matched as take_snapshot does.
  node::NodeSnapshot build(const node::ReadOne& read_one = nullptr) {
    std::sort(snap_.records.begin(), snap_.records.end(),
              [](const node::ProcessRecord& a, const node::ProcessRecord& b) { return a.process.pid < b.process.pid; });
    node::match_listings(snap_, read_one);
    return snap_;
  }

 private:
  node::NodeSnapshot snap_;
};

}  // namespace gpureap::test
