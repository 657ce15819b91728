#include "sys/parse_number.hpp"
#include "prestop/self.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <climits>
#include <string>

#include "container/cgroup_layouts.hpp"
#include "proc/parse.hpp"

namespace gpureap::prestop {

namespace {

std::optional<std::string> read_link(const sys::HostRoot& root, const std::string& rel) {
  char buf[PATH_MAX];
  const ssize_t n = ::readlinkat(root.dir_fd(), rel.c_str(), buf, sizeof buf);
  if (n <= 0) return std::nullopt;
  return std::string(buf, static_cast<std::size_t>(n));
}

using sys::parse_number;

}  // namespace

std::optional<std::uint64_t> parse_ns_link(std::string_view text, std::string_view kind) {
  if (text.size() < kind.size() + 3 || text.substr(0, kind.size()) != kind) return std::nullopt;
  text.remove_prefix(kind.size());
  if (text.substr(0, 2) != ":[" || text.back() != ']') return std::nullopt;
  return parse_number<std::uint64_t>(text.substr(2, text.size() - 3));
}

std::optional<std::uint64_t> read_pid_namespace(const sys::HostRoot& root, pid_t pid) {
  auto link = read_link(root, "proc/" + std::to_string(pid) + "/ns/pid");
  if (!link) return std::nullopt;
  return parse_ns_link(*link);
}

sys::Result<SelfIdentity> read_self_identity(const sys::HostRoot& root) {
  SelfIdentity self;
  auto self_link = read_link(root, "proc/self");
  if (!self_link) return sys::errno_error(errno, "readlink " + root.join("proc/self"));
  auto pid = parse_number<pid_t>(*self_link);
  if (!pid) return sys::Error{EBADMSG, root.join("proc/self") + " -> " + *self_link + ": not a pid"};
  if (*pid != ::getpid()) {
    return sys::Error{EXDEV, root.join("proc") + " is not this PID namespace's /proc (it shows us as pid " +
                                 std::to_string(*pid) + ", we are " + std::to_string(::getpid()) +
                                 "): refusing to signal by its pids"};
  }
  self.pid = *pid;
  auto ns_link = read_link(root, "proc/self/ns/pid");
  if (!ns_link) return sys::errno_error(errno, "readlink " + root.join("proc/self/ns/pid"));
  auto ns = parse_ns_link(*ns_link);
  if (!ns) return sys::Error{EBADMSG, root.join("proc/self/ns/pid") + " -> " + *ns_link + ": unparsable"};
  self.pid_namespace = *ns;
  if (auto cg = root.read_file("proc/self/cgroup")) {
    if (auto ref = container::container_from_cgroups(proc::parse_cgroup(*cg))) self.container_id = ref->id;
  }
  return self;
}

}  // namespace gpureap::prestop
