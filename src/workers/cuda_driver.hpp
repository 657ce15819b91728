// The few CUDA driver API calls a workload needs, through dlopen of
// libcuda.so.1: no CUDA headers or toolkit at build time, and a binary that
// still runs (with the sim device) where no NVIDIA driver is installed.
#pragma once

#include <cstdint>
#include <string>

#include "sys/error.hpp"

namespace gpureap::workers {

// One context with one allocation, like the plan's raw driver-API worker.
class CudaHold {
 public:
  CudaHold() = default;
  CudaHold(CudaHold&& other) noexcept;
  CudaHold& operator=(CudaHold&&) = delete;
  CudaHold(const CudaHold&) = delete;
  CudaHold& operator=(const CudaHold&) = delete;
  ~CudaHold();  // does NOT free: process exit releases, as for a real crashing worker

  // Frees the allocation and destroys the context (the --term-cleanup path).
  sys::Status release();

 private:
  friend sys::Result<CudaHold> cuda_hold(unsigned device, std::uint64_t bytes);
  void* lib_ = nullptr;
  void* ctx_ = nullptr;
  std::uint64_t ptr_ = 0;
};

// Error code ENOENT (with "libcuda.so.1" in the message) when the library is missing.
sys::Result<CudaHold> cuda_hold(unsigned device, std::uint64_t bytes);

}  // namespace gpureap::workers
