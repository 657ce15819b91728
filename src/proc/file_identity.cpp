#include "proc/file_identity.hpp"

#include <linux/kcmp.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <string>

namespace gpureap::proc {
namespace {

// 0 same description, 1 first lower, 2 first higher (kcmp(2)); -1 with errno.
long kcmp_file(pid_t pid1, int fd1, pid_t pid2, int fd2) {
  return ::syscall(SYS_kcmp, pid1, pid2, KCMP_FILE, static_cast<unsigned long>(fd1),
                   static_cast<unsigned long>(fd2));
}

bool same_pid_namespace(const sys::HostRoot& root) {
  char buf[32];
  const ssize_t n = ::readlinkat(root.dir_fd(), "proc/self", buf, sizeof buf);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof buf) return false;
  pid_t self = 0;
  auto [end, ec] = std::from_chars(buf, buf + n, self);
  return ec == std::errc{} && end == buf + n && self == ::getpid();
}

}  // namespace

std::vector<std::uint64_t> ids_by_order(
    std::size_t n, const std::function<int(std::size_t, std::size_t)>& compare) {
  std::vector<std::size_t> order(n);
  for (std::size_t i = 0; i < n; ++i) order[i] = i;
  std::vector<std::size_t> merged(n);
  for (std::size_t width = 1; width < n; width *= 2) {
    for (std::size_t lo = 0; lo < n; lo += 2 * width) {
      const std::size_t mid = std::min(lo + width, n);
      const std::size_t hi = std::min(lo + 2 * width, n);
      std::size_t a = lo, b = mid, out = lo;
      while (a < mid && b < hi)
        merged[out++] = compare(order[b], order[a]) < 0 ? order[b++] : order[a++];
      while (a < mid) merged[out++] = order[a++];
      while (b < hi) merged[out++] = order[b++];
    }
    order.swap(merged);
  }
  std::vector<std::uint64_t> ids(n, 0);
  std::uint64_t id = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (i == 0 || compare(order[i - 1], order[i]) != 0) ++id;
    ids[order[i]] = id;
  }
  return ids;
}

sys::Status identify_files_by_kcmp(const sys::HostRoot& root,
                                   const std::vector<Process*>& processes,
                                   std::size_t max_descriptors) {
  if (!same_pid_namespace(root)) {
    return sys::Error{
        EXDEV,
        root.join("proc") + " is not this process's PID namespace: kcmp cannot compare its pids"};
  }
  struct Descriptor {
    Process* process;
    int fd;
  };
  std::vector<Descriptor> all;
  for (Process* p : processes) {
    for (int fd : p->gpu_fd_numbers) all.push_back({p, fd});
  }
  if (all.size() > max_descriptors) {
    return sys::Error{E2BIG, std::to_string(all.size()) +
                                 " GPU descriptors, more than kcmp compares (" +
                                 std::to_string(max_descriptors) + ")"};
  }
  if (all.empty()) return sys::Ok{};
  // One call up front tells whether kcmp works here at all.
  if (kcmp_file(all[0].process->pid, all[0].fd, all[0].process->pid, all[0].fd) < 0) {
    return sys::errno_error(errno, "kcmp(KCMP_FILE) on pid " + std::to_string(all[0].process->pid));
  }
  std::vector<Process*> unseen;  // a descriptor kcmp could not compare
  const auto ids = ids_by_order(all.size(), [&](std::size_t a, std::size_t b) {
    const long r = kcmp_file(all[a].process->pid, all[a].fd, all[b].process->pid, all[b].fd);
    if (r < 0) {
      unseen.push_back(all[a].process);
      unseen.push_back(all[b].process);
      return a < b ? -1 : 1;
    }
    return r == 0 ? 0 : (r == 1 ? -1 : 1);
  });
  for (Process* p : processes) p->gpu_files.clear();
  for (std::size_t i = 0; i < all.size(); ++i) all[i].process->gpu_files.push_back(ids[i]);
  for (Process* p : processes) {
    std::sort(p->gpu_files.begin(), p->gpu_files.end());
    p->gpu_files.erase(std::unique(p->gpu_files.begin(), p->gpu_files.end()), p->gpu_files.end());
  }
  for (Process* p : unseen) p->gpu_files.clear();
  return sys::Ok{};
}

}  // namespace gpureap::proc
