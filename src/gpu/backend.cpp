// The backend factory: one place that turns `--gpu SPEC` into a backend.
#include "gpu/backend.hpp"

#include <cerrno>

#include "gpu/basic_backends.hpp"
#include "gpu/nvml_backend.hpp"
#include "gpu/sim_backend.hpp"

namespace gpureap::gpu {

sys::Result<std::vector<DeviceUtilization>> GpuBackend::process_utilization(std::uint64_t /*since_us*/) {
  return sys::Error{ENOTSUP, "GPU backend '" + std::string(name()) + "' has no per-process utilization"};
}

sys::Result<std::unique_ptr<GpuBackend>> make_backend(std::string_view spec, const sys::HostRoot& root) {
  // auto = NVML; when libnvidia-ml is missing or reports no devices, the NVML
  // backend itself is "none" with its reason (an empty GPU list is not an error).
  if (spec == "auto" || spec == "nvml") return make_nvml_backend(root);
  if (spec == "sim") return make_sim_backend(root);
  if (spec.rfind("sim:", 0) == 0 && spec.size() > 4) {
    return make_sim_backend(root, SimOptions{std::string(spec.substr(4))});
  }
  if (spec.rfind("json:", 0) == 0) return make_json_backend(std::string(spec.substr(5)), root);
  if (spec == "none") return make_none_backend();
  return sys::Error{EINVAL, "--gpu: unknown backend '" + std::string(spec) +
                                "' (valid: auto, nvml, sim, sim:DIR, json:FILE, none)"};
}

}  // namespace gpureap::gpu
