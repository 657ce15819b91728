// The simulated GPU as a backend (`--gpu sim`): reads the sim directory that
// sim_client.hpp describes and decides which contexts are held by scanning
// <root>/proc/*/fd, so a context lives exactly as long as some process keeps a
// descriptor on it — the driver semantics FACTS.md measured on an H200.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "gpu/backend.hpp"
#include "gpu/sim_client.hpp"

namespace gpureap::gpu {

struct SimOptions {
  // The sim directory; else $GPUREAP_SIM_DIR, else <host root>/run/gpureap/sim.
  // Read as a path in the caller's filesystem (not joined to the host root).
  std::optional<std::string> dir;
};

// Never fails: an uninitialised sim dir gives no devices and says why.
std::unique_ptr<GpuBackend> make_sim_backend(const sys::HostRoot& root, const SimOptions& options = {});

// Parses config.json; errors name `what` and the field ("config.json: devices[1].total: ...").
sys::Result<sim::Config> parse_sim_config(std::string_view text, std::string_view what);

}  // namespace gpureap::gpu
