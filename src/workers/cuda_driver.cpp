#include "workers/cuda_driver.hpp"

#include <dlfcn.h>

#include <utility>

namespace gpureap::workers {

namespace {

// Own declarations of the driver API (cuda.h is not available at build time).
using CUresult = int;
using CUdevice = int;
using CUcontext = void*;
using CUdeviceptr = unsigned long long;  // NOLINT(google-runtime-int): the ABI's type
using cuInit_t = CUresult (*)(unsigned);
using cuDeviceGet_t = CUresult (*)(CUdevice*, int);
using cuCtxCreate_t = CUresult (*)(CUcontext*, unsigned, CUdevice);
using cuMemAlloc_t = CUresult (*)(CUdeviceptr*, std::size_t);
using cuMemFree_t = CUresult (*)(CUdeviceptr);
using cuCtxDestroy_t = CUresult (*)(CUcontext);

template <class F>
F symbol(void* lib, const char* name) {
  // dlsym returns void*; converting to a function pointer is how POSIX intends it.
  return reinterpret_cast<F>(::dlsym(lib, name));
}

sys::Error cuda_error(const char* call, CUresult rc) {
  return sys::Error{EIO, std::string(call) + " failed with CUresult " + std::to_string(rc)};
}

}  // namespace

CudaHold::CudaHold(CudaHold&& other) noexcept
    : lib_(std::exchange(other.lib_, nullptr)),
      ctx_(std::exchange(other.ctx_, nullptr)),
      ptr_(std::exchange(other.ptr_, 0)) {}

CudaHold::~CudaHold() = default;

sys::Status CudaHold::release() {
  if (lib_ == nullptr || ctx_ == nullptr) return sys::Ok{};
  auto mem_free = symbol<cuMemFree_t>(lib_, "cuMemFree_v2");
  auto ctx_destroy = symbol<cuCtxDestroy_t>(lib_, "cuCtxDestroy_v2");
  if (mem_free == nullptr || ctx_destroy == nullptr) return sys::Error{0, "libcuda.so.1 lacks cuMemFree_v2/cuCtxDestroy_v2"};
  if (ptr_ != 0) {
    if (CUresult rc = mem_free(ptr_); rc != 0) return cuda_error("cuMemFree_v2", rc);
    ptr_ = 0;
  }
  if (CUresult rc = ctx_destroy(ctx_); rc != 0) return cuda_error("cuCtxDestroy_v2", rc);
  ctx_ = nullptr;
  return sys::Ok{};
}

sys::Result<CudaHold> cuda_hold(unsigned device, std::uint64_t bytes) {
  CudaHold hold;
  // Never dlclose'd: the context lives until the process ends or release().
  hold.lib_ = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (hold.lib_ == nullptr) {
    const char* why = ::dlerror();
    return sys::Error{ENOENT, std::string("cannot load libcuda.so.1 (no NVIDIA driver here?): ") +
                                  (why != nullptr ? why : "unknown error")};
  }
  auto init = symbol<cuInit_t>(hold.lib_, "cuInit");
  auto device_get = symbol<cuDeviceGet_t>(hold.lib_, "cuDeviceGet");
  auto ctx_create = symbol<cuCtxCreate_t>(hold.lib_, "cuCtxCreate_v2");
  auto mem_alloc = symbol<cuMemAlloc_t>(hold.lib_, "cuMemAlloc_v2");
  if (init == nullptr || device_get == nullptr || ctx_create == nullptr || mem_alloc == nullptr) {
    return sys::Error{0, "libcuda.so.1 lacks cuInit/cuDeviceGet/cuCtxCreate_v2/cuMemAlloc_v2"};
  }
  if (CUresult rc = init(0); rc != 0) return cuda_error("cuInit", rc);
  CUdevice dev = 0;
  if (CUresult rc = device_get(&dev, static_cast<int>(device)); rc != 0) return cuda_error("cuDeviceGet", rc);
  if (CUresult rc = ctx_create(&hold.ctx_, 0, dev); rc != 0) return cuda_error("cuCtxCreate_v2", rc);
  if (bytes != 0) {
    CUdeviceptr ptr = 0;
    if (CUresult rc = mem_alloc(&ptr, static_cast<std::size_t>(bytes)); rc != 0) return cuda_error("cuMemAlloc_v2", rc);
    hold.ptr_ = ptr;
  }
  return hold;
}

}  // namespace gpureap::workers
