// GpuSnapshot <-> JSON in the schema `--gpu json:FILE` replays and
// `gpureap trace --json` prints under "gpu" (a contract outside tests rely on):
//   {"driver_version": "...", "devices": [{"index": 0, "uuid": "GPU-...", "minor": 0,
//     "name": "...", "memory": {"total": B, "used": B, "reserved": B},
//     "processes": [{"pid": N, "used_memory": B}]}]}
// Bytes are integers; values the driver could not give are null (minor, memory,
// memory.reserved, used_memory), never 0.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "gpu/gpu_snapshot.hpp"
#include "sys/error.hpp"

namespace gpureap::gpu {

[[nodiscard]] nlohmann::json snapshot_to_json(const GpuSnapshot& snapshot);
// Compact one-line text (dump of snapshot_to_json).
[[nodiscard]] std::string snapshot_to_json_text(const GpuSnapshot& snapshot);

// `what` names the source in errors: "gpu.json: devices[0].memory.total: expected an unsigned integer".
sys::Result<GpuSnapshot> snapshot_from_json(const nlohmann::json& doc, std::string_view what);
sys::Result<GpuSnapshot> snapshot_from_json_text(std::string_view text, std::string_view what);

}  // namespace gpureap::gpu
