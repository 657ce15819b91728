// Finding: what a detector concluded, with the evidence and the advice an SRE
// acts on. Detectors are pure functions of the NodeSnapshot.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "node/snapshot.hpp"

namespace gpureap::findings {

enum class Kind {
  zombie,
  orphan,
  orphaned_context,
  // A live listed process whose context another process also holds through
  // inherited descriptors: killing the creator would leave the memory held.
  latent_orphaned_context,
  hidden_holder,
  ghost_memory,
  nccl_missing_rank,
  // A live listed process holding GPU memory at 0 % SM for the idle threshold
  // (utilization sampled over time).
  idle_holder,
  // A torch.distributed job with missing ranks whose survivors run near
  // 100 % SM with flat memory: the NCCL hang, seen happening.
  nccl_spin,
};
// Every kind, in the order the detectors report them (for renderers that
// list all kinds, with zero counts too).
inline constexpr Kind kAllKinds[] = {Kind::orphaned_context, Kind::latent_orphaned_context, Kind::ghost_memory,
                                     Kind::nccl_spin, Kind::nccl_missing_rank, Kind::idle_holder, Kind::zombie,
                                     Kind::orphan, Kind::hidden_holder};
// info does not make a check fail; warning and critical do (exit 1).
enum class Severity { info, warning, critical };
inline constexpr Severity kAllSeverities[] = {Severity::info, Severity::warning, Severity::critical};

std::string_view to_string(Kind k);
std::string_view to_string(Severity s);

// A live process named as a holder of another process's GPU context: an
// orphaned context's likely inheritor, or a latent one's.
struct Holder {
  pid_t pid = 0;
  std::string comm;
  // The evidence: "same process group", "shares 3 open file descriptions of
  // its device files with pid 601", "maps nvidia0", "holds nvidia0 and is not
  // listed by the driver"...
  std::string reason;
};

// nccl_missing_rank: what a surviving rank will do about its dead peer, from its
// environment (TORCH_NCCL_ASYNC_ERROR_HANDLING, TORCH_NCCL_BLOCKING_WAIT).
enum class Watchdog {
  teardown,      // async error handling 1 or 3 (3 is PyTorch >= 2.2's default): ends it after the timeout
  cleanup_only,  // async error handling 2: communicators aborted after the timeout, process lives on
  blocking_wait, // TORCH_NCCL_BLOCKING_WAIT=1: the collective raises after the timeout
  hang,          // async error handling 0: spins until killed
  unknown,       // a value PyTorch would reject
};
std::string_view to_string(Watchdog w);

struct NcclSurvivor {
  pid_t pid = 0;
  std::string comm;
  std::optional<int> rank;
  int local_rank = 0;
  std::optional<std::uint64_t> gpu_memory;  // driver's number; nullopt when not listed / n/a
  std::vector<unsigned> gpus;               // devices the driver lists it on
  Watchdog watchdog = Watchdog::teardown;
  std::string watchdog_env;                 // "TORCH_NCCL_ASYNC_ERROR_HANDLING=0", or "default"
  std::string watchdog_detail;              // the verdict in words
};

// One torch.distributed job's ranks on this node (one pod, or the host).
struct NcclGroup {
  std::string scope;             // "pod <uid>", "container <id>", "host"
  std::string run_id;            // TORCHELASTIC_RUN_ID ("" when unset)
  std::string master_addr;
  std::optional<int> master_port;
  std::optional<int> world_size;
  std::optional<int> group_rank;  // GROUP_RANK (torchrun's node rank) when set
  int local_world_size = 0;
  std::string local_world_size_source;  // "LOCAL_WORLD_SIZE" or how it was inferred
  std::vector<int> present_local_ranks;
  std::vector<int> missing_local_ranks;
  std::vector<pid_t> zombie_pids;       // members that are zombies (counted as missing)
  std::vector<NcclSurvivor> survivors;
  std::uint64_t survivor_memory = 0;    // sum of the survivors' known GPU memory
  std::string watchdog;                 // "hang" when any survivor hangs, else the common verdict or "mixed"
};

struct Finding {
  Kind kind = Kind::zombie;
  Severity severity = Severity::warning;
  std::optional<pid_t> pid;            // subject process (dead PID for orphaned_context)
  std::optional<unsigned> device;      // GPU index where it applies
  // The GPU memory at stake, where one is known: an orphaned context's, the
  // unexplained ghost bytes, an idle holder's, an NCCL job's survivors'.
  std::optional<std::uint64_t> bytes;
  std::string message;                 // what is wrong, with evidence
  std::string advice;                  // what to do
  std::vector<Holder> holders;         // orphaned_context and latent_orphaned_context
  std::vector<pid_t> pids;             // zombie: every zombie of the same parent (pid = the first)
  // One finding per root cause: the orphan and hidden_holder findings about
  // the processes named in `holders`, folded in here by detect_all.
  std::vector<Finding> related;
  // nccl_missing_rank only. Behind a pointer: a node can have thousands of
  // other findings, and an inline group would triple each one's size.
  std::shared_ptr<const NcclGroup> group;
};

// What tells a process that holds a GPU context from a driver client that only
// opened the device nodes (an NVML monitor holds descriptors on the same nodes
// as a CUDA worker). Data, so a measurement on another driver changes a table,
// not code: docs/contexts.md says what was measured and the limits.
struct ContextEvidenceRule {
  // A mapping of one of these device nodes (/proc/PID/maps) shows a context;
  // "nvidia#" stands for the GPU's own node, nvidia<minor>. Empty: mappings
  // are no evidence.
  std::vector<std::string> mapped_nodes = {"nvidia#", "nvidia-uvm"};
  // At least this many descriptors on the GPU's own node show a context (a
  // CUDA worker held 20 on nvidia0 on the H200, a pynvml agent fewer: to be
  // measured). 0: descriptor counts are no evidence.
  unsigned min_gpu_node_fds = 0;
};

struct DetectOptions {
  // Ghost memory: used memory the driver's process list does not explain, at
  // least this much (docs/ghost-memory.md).
  std::uint64_t ghost_threshold_bytes = 128ULL << 20;
  // With v1 accounting only (drivers before R510), `used` includes the memory
  // the driver reserves for itself (615 MiB on an idle H200): so much more
  // must be unexplained before it counts.
  std::uint64_t v1_reserved_allowance_bytes = 1024ULL << 20;
  // Processes known to hold GPU descriptors without a context (NVML clients):
  // their hidden_holder findings are info, not warnings. Names as the kernel
  // keeps them, cut to 15 bytes (gpureap-exporter is "gpureap-exporte").
  std::vector<std::string> monitor_comms = {
      "dcgm-exporter",   "nv-hostengine", "nvidia-device-p", "nvidia-smi", "nvitop",
      "nvidia-persiste", "gpureap",       "gpureap-exporte", "nvtop",      "gpustat"};
  ContextEvidenceRule context_evidence;
  // idle_holder: holds at least this much at 0 % SM for at least this long.
  std::uint64_t idle_min_bytes = 512ULL << 20;
  double idle_seconds = 600;
  // nccl_spin: every survivor of a job with missing ranks at a mean SM of at
  // least this, seen for at least `spin_seconds`, its memory moving by no more
  // than the tolerance.
  double spin_sm_percent = 90;
  double spin_seconds = 60;
  std::uint64_t spin_memory_tolerance_bytes = 64ULL << 20;
};

std::vector<Finding> detect_zombies(const node::NodeSnapshot& snap);
std::vector<Finding> detect_orphans(const node::NodeSnapshot& snap);
// Listings whose process is gone, naming the live processes that hold the
// context, by evidence (src/findings/contexts.cpp; docs/contexts.md).
std::vector<Finding> detect_orphaned_contexts(const node::NodeSnapshot& snap,
                                              const DetectOptions& opt = {});
// Live listed processes whose context unlisted processes share (inherited
// descriptions): one warning per creator, naming them.
std::vector<Finding> detect_latent_orphaned_contexts(const node::NodeSnapshot& snap);
std::vector<Finding> detect_hidden_holders(const node::NodeSnapshot& snap, const DetectOptions& opt);
std::vector<Finding> detect_ghost_memory(const node::NodeSnapshot& snap, const DetectOptions& opt);
// torch.distributed jobs on this node with local ranks missing while the others hold
// GPU memory (src/findings/nccl.cpp; docs/nccl.md).
std::vector<Finding> detect_nccl_missing_ranks(const node::NodeSnapshot& snap);
// Listed, live processes holding at least idle_min_bytes at 0 % SM for
// idle_seconds, by the snapshot's activity window (none without one).
std::vector<Finding> detect_idle_holders(const node::NodeSnapshot& snap, const DetectOptions& opt);
// The nccl_missing_rank findings whose survivors all spin (mean SM >=
// spin_sm_percent over spin_seconds, memory flat): one nccl_spin each, sharing
// the job's group.
std::vector<Finding> detect_nccl_spin(const node::NodeSnapshot& snap, const std::vector<Finding>& missing_ranks,
                                      const DetectOptions& opt);
// The environ keys detect_nccl_missing_ranks reads: the snapshot must keep them.
std::vector<std::string> nccl_env_keys();
// All detectors, in a stable order, one finding per root cause: orphan and
// hidden_holder findings about a context's named holders become its `related`,
// and a spinning job's nccl_missing_rank becomes its nccl_spin's.
std::vector<Finding> detect_all(const node::NodeSnapshot& snap, const DetectOptions& opt = {});
// The folding detect_all does, on its own (for tests and other orderings).
void group_related(std::vector<Finding>& findings);

[[nodiscard]] bool fails_check(const std::vector<Finding>& findings);

}  // namespace gpureap::findings
