// Opening the host root and the GPU backend and taking one NodeSnapshot, as
// every reading subcommand does.
#pragma once

#include "cli/common.hpp"
#include "node/snapshot.hpp"
#include "sys/error.hpp"

namespace gpureap::cli {

// With sample_seconds > 0, per-process utilization is read every
// sample_period_seconds for that long first, and the snapshot carries the
// window (idle_holder, nccl_spin).
sys::Result<node::NodeSnapshot> take_node_snapshot(const CommonOptions& options, double sample_seconds = 0,
                                                   double sample_period_seconds = 1);

}  // namespace gpureap::cli
