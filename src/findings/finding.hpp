// Finding: what a detector concluded, with the evidence and the advice an SRE
// acts on. Detectors are pure functions of the NodeSnapshot.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "node/snapshot.hpp"

namespace gpureap::findings {

enum class Kind { zombie, orphan, orphaned_context, hidden_holder, ghost_memory };
// info does not make a check fail; warning and critical do (exit 1).
enum class Severity { info, warning, critical };

std::string_view to_string(Kind k);
std::string_view to_string(Severity s);

// A live process named as a likely inheritor of a dead process's GPU context.
struct Holder {
  pid_t pid = 0;
  std::string comm;
  std::string reason;  // "same process group", "same session", "same container", "holds nvidia0"
};

struct Finding {
  Kind kind = Kind::zombie;
  Severity severity = Severity::warning;
  std::optional<pid_t> pid;            // subject process (dead PID for orphaned_context)
  std::optional<unsigned> device;      // GPU index where it applies
  std::string message;                 // what is wrong, with evidence
  std::string advice;                  // what to do
  std::vector<Holder> holders;         // orphaned_context only
  std::vector<pid_t> pids;             // zombie: every zombie of the same parent (pid = the first)
};

struct DetectOptions {
  std::uint64_t ghost_threshold_bytes = 128ULL << 20;  // v2 "used" with no listed process
  // Processes known to hold GPU descriptors without a context (NVML clients):
  // their hidden_holder findings are info, not warnings.
  std::vector<std::string> monitor_comms = {"dcgm-exporter", "nv-hostengine", "nvidia-device-p",
                                            "nvidia-smi", "nvitop", "nvidia-persiste",
                                            "gpureap", "nvtop", "gpustat"};
};

std::vector<Finding> detect_zombies(const node::NodeSnapshot& snap);
std::vector<Finding> detect_orphans(const node::NodeSnapshot& snap);
std::vector<Finding> detect_orphaned_contexts(const node::NodeSnapshot& snap);
std::vector<Finding> detect_hidden_holders(const node::NodeSnapshot& snap, const DetectOptions& opt);
std::vector<Finding> detect_ghost_memory(const node::NodeSnapshot& snap, const DetectOptions& opt);
// All detectors, in a stable order.
std::vector<Finding> detect_all(const node::NodeSnapshot& snap, const DetectOptions& opt = {});

[[nodiscard]] bool fails_check(const std::vector<Finding>& findings);

}  // namespace gpureap::findings
