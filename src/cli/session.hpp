// Opening the host root and the GPU backend and taking one NodeSnapshot, as
// every reading subcommand does.
#pragma once

#include "cli/common.hpp"
#include "node/snapshot.hpp"
#include "sys/error.hpp"

namespace gpureap::cli {

sys::Result<node::NodeSnapshot> take_node_snapshot(const CommonOptions& options);

}  // namespace gpureap::cli
