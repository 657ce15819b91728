#include "proc/process_memory.hpp"

#include <sys/uio.h>

#include <cerrno>
#include <cstdint>

namespace gpureap::proc {

AreaCopy copy_areas(pid_t pid, const MemoryAreas& areas, bool args, bool env, std::string& out) {
  // Past this the files are read instead (they have no limit of their own).
  constexpr std::uint64_t kMaxArea = std::uint64_t{8} << 20;
  out.clear();
  if (areas.arg_end < areas.arg_start || areas.env_end < areas.env_start)
    return AreaCopy::unavailable;
  const std::uint64_t arg_len = args ? areas.arg_end - areas.arg_start : 0;
  const std::uint64_t env_len = env ? areas.env_end - areas.env_start : 0;
  if (arg_len > kMaxArea || env_len > kMaxArea) return AreaCopy::unavailable;
  out.resize(arg_len + env_len);
  if (out.empty()) return AreaCopy::copied;
  iovec local{out.data(), out.size()};
  iovec remote[2];
  unsigned n = 0;
  // NOLINTBEGIN(performance-no-int-to-ptr): addresses in the other process's memory
  if (arg_len > 0) remote[n++] = iovec{reinterpret_cast<void*>(areas.arg_start), arg_len};
  if (env_len > 0) remote[n++] = iovec{reinterpret_cast<void*>(areas.env_start), env_len};
  // NOLINTEND(performance-no-int-to-ptr)
  const ssize_t got = ::process_vm_readv(pid, &local, 1, remote, n, 0);
  if (got == static_cast<ssize_t>(out.size())) return AreaCopy::copied;
  const int err = got < 0 ? errno : 0;
  out.clear();
  if (err == EPERM || err == ENOSYS) return AreaCopy::refused;
  return AreaCopy::unavailable;  // ESRCH, EFAULT, a short copy (a part unmapped), ...
}

}  // namespace gpureap::proc
