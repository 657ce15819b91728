// NodeSnapshot: the join of processes × descriptors × GPU × containers, taken
// once. Everything downstream (detectors, renderers) reads only this.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "container/container_ref.hpp"
#include "gpu/activity.hpp"
#include "gpu/gpu_snapshot.hpp"
#include "proc/process.hpp"
#include "proc/scan.hpp"

namespace gpureap::node {

// How a PID from the driver's list was matched to a live process.
enum class PidMatch {
  host,       // the driver's PID is a thread-group id in the scanned /proc
  thread,     // the driver's PID is a thread id; matched to its Tgid
  namespace_, // the driver's PID is a container-local PID (NSpid innermost) of a GPU holder
  dead,       // no process has this PID: the driver keeps listing a process that is gone
  // A process has this PID but holds no GPU descriptor (its descriptor table was
  // read): not the context's owner. The listed process is gone and its PID was
  // reused, or it is a zombie whose descriptors a forked child inherited.
  stale,
};
std::string_view to_string(PidMatch m);
// The driver lists a process that no longer holds the context: its memory is an
// orphaned context whoever holds it now.
[[nodiscard]] constexpr bool names_gone_process(PidMatch m) {
  return m == PidMatch::dead || m == PidMatch::stale;
}

struct DriverListing {
  unsigned device_index = 0;
  gpu::GpuProcess entry;                 // as the driver gave it
  PidMatch match = PidMatch::dead;
  // Index into NodeSnapshot::records: the matched process; for `stale`, the one
  // that has the PID now (the listing is not attributed to it); none when dead.
  std::optional<std::size_t> record;
};

struct ProcessRecord {
  proc::Process process;
  // null: a host process. Shared by every process of the container (one
  // resolution each), so a record stays small on nodes of thousands.
  std::shared_ptr<const container::ContainerInfo> container;
  std::vector<std::size_t> listings;                   // indexes into NodeSnapshot::listings
  // The GPU device nodes this process has mapped (/proc/PID/maps, named as in
  // gpu_fds): read only for the unlisted holders of a GPU on which the driver
  // lists a process that is gone, whose context is in question. nullopt when
  // not read or unreadable.
  std::optional<std::vector<std::string>> gpu_mappings;

  [[nodiscard]] bool listed() const { return !listings.empty(); }
};

struct NodeSnapshot {
  std::chrono::system_clock::time_point taken_at;
  std::string host_root;
  pid_t self_pid = 0;  // our own process: NVML opens device nodes, so we are a holder
  std::vector<ProcessRecord> records;  // every scanned process, sorted by pid
  proc::ScanStats scan_stats;
  std::string gpu_backend;             // "nvml", "sim", "json", "none"
  std::string gpu_unavailable_reason;  // said once when the backend has no devices
  gpu::GpuSnapshot gpu;
  std::vector<DriverListing> listings;
  // Every listed process must hold a descriptor the scan recognises (a live
  // driver or the simulated device). False for a snapshot replayed on a machine
  // without NVIDIA nodes, where holding none proves nothing (no `stale` match).
  bool gpu_descriptors_visible = false;
  // Utilization over the sampling window (exporter, `trace --sample S`);
  // nullopt when not sampled: then nothing is judged idle or spinning.
  std::optional<gpu::Activity> activity;

  [[nodiscard]] const ProcessRecord* find(pid_t pid) const;
  // For a `stale` listing, the process that has its PID now; else null.
  [[nodiscard]] const proc::Process* pid_now(const DriverListing& l) const;
  // Memory the driver attributes to this record (sum over its listings); nullopt when
  // it is not listed or the driver gave no number.
  [[nodiscard]] std::optional<std::uint64_t> gpu_memory(const ProcessRecord& r) const;
  // The record of the container-local PID 1 in the same container as `r`, if any.
  [[nodiscard]] const ProcessRecord* container_init(const ProcessRecord& r) const;
  // The device node of GPU `index` as gpu_fds names it: "nvidia<minor>".
  [[nodiscard]] std::string device_node_name(unsigned index) const;
};

// Resolves each driver listing to a record (pure given `read_one`; exposed for tests).
// `read_one` reads a PID that is not among the records (a thread id, or a process
// started after the scan); it returns nullopt when no such process exists.
using ReadOne = std::function<std::optional<proc::Process>(pid_t)>;
void match_listings(NodeSnapshot& snap, const ReadOne& read_one);

}  // namespace gpureap::node
