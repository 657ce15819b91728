#include "sys/host_root.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace gpureap::sys {

Result<HostRoot> HostRoot::open(std::string root) {
  if (root.empty()) return Error{EINVAL, "host root: empty path"};
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  int fd = ::open(root.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, "host root " + root);
  return HostRoot(std::move(root), UniqueFd(fd));
}

std::string HostRoot::resolve_path(std::optional<std::string> flag_value) {
  if (flag_value && !flag_value->empty()) return *flag_value;
  if (const char* env = std::getenv("GPUREAP_HOST_ROOT"); env != nullptr && *env != '\0') {
    return env;
  }
  return "/";
}

std::string HostRoot::join(std::string_view rel) const {
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  std::string out = root_;
  if (out.back() != '/') out.push_back('/');
  out.append(rel);
  return out;
}

Result<std::string> read_all(int fd, std::string_view what) {
  std::string out;
  char buf[8192];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno_error(errno, "read " + std::string(what));
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  return out;
}

Result<std::string> read_file_at(int dir_fd, const char* rel, std::string_view what) {
  int fd = ::openat(dir_fd, rel, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno_error(errno, "open " + std::string(what));
  UniqueFd owned(fd);
  return read_all(fd, what);
}

Result<std::string> HostRoot::read_file(std::string_view rel) const {
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  // Built once, not assigned "." after: GCC 12 at -O3 takes that assignment
  // for an overlapping memcpy (a -Wrestrict false positive, GCC PR105651).
  const std::string rel_s = rel.empty() ? std::string(".") : std::string(rel);
  return read_file_at(dir_fd(), rel_s.c_str(), join(rel));
}

bool HostRoot::exists(std::string_view rel) const {
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  std::string rel_s(rel);
  struct stat st {};
  return ::fstatat(dir_fd(), rel_s.empty() ? "." : rel_s.c_str(), &st, 0) == 0;
}

}  // namespace gpureap::sys
