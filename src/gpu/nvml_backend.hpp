// The NVML backend: libnvidia-ml loaded with dlopen, no NVIDIA headers. The
// shim itself (declarations, symbol loading, version fallbacks) lives in one
// file, nvml_backend.cpp.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "gpu/backend.hpp"

namespace gpureap::gpu {

struct NvmlOptions {
  // Library names tried in order (tests point this at a fake libnvidia-ml).
  std::vector<std::string> library_names = {"libnvidia-ml.so.1", "libnvidia-ml.so"};
  // A call into NVML that takes longer than this (lost GPU) is abandoned and
  // the snapshot fails with an Error saying so, instead of hanging the tool.
  std::chrono::milliseconds call_timeout{10000};
};

// Never fails: a backend whose library or driver is missing has no devices and
// says why in unavailable_reason().
std::unique_ptr<GpuBackend> make_nvml_backend(const sys::HostRoot& root, NvmlOptions options = {});

}  // namespace gpureap::gpu
