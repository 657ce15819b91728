// The two backends that need no driver: JSON replay and none.
#pragma once

#include <memory>
#include <string>

#include "gpu/backend.hpp"

namespace gpureap::gpu {

// `--gpu json:FILE`: replays a snapshot in the snapshot_json.hpp schema. FILE is
// read relative to the current directory, NOT the host root: it is the user's
// input file, not part of the host being inspected. The file is parsed once
// here (a bad file is an Error now, naming file and field) and again on every
// snapshot(), so a test may rewrite it between readings. Its device matcher is
// the real nodes under the host root plus /dev/nvidia<minor> of each replayed
// device, nvidiactl and nvidia-uvm, and major 195.
sys::Result<std::unique_ptr<GpuBackend>> make_json_backend(std::string path, const sys::HostRoot& root);

// `--gpu none`: no devices; unavailable_reason() is `reason`.
std::unique_ptr<GpuBackend> make_none_backend(std::string reason = "no GPU backend");

}  // namespace gpureap::gpu
