// HostRoot: every path into the host goes through one root (DESIGN.md contract).
// A DaemonSet mounts the host at /host; tests point it at a fixture tree.
// The root is opened once as a directory fd; reads are relative to it so a
// scan does no repeated lookups of the root prefix.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "sys/error.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::sys {

class HostRoot {
 public:
  // Opens `root` (a directory). Fails with an Error naming the path.
  static Result<HostRoot> open(std::string root);
  // The root from --host-root, else $GPUREAP_HOST_ROOT, else "/".
  static std::string resolve_path(std::optional<std::string> flag_value);

  [[nodiscard]] const std::string& path() const { return root_; }
  [[nodiscard]] int dir_fd() const { return fd_->get(); }
  [[nodiscard]] bool is_slash() const { return root_ == "/"; }

  // "proc/1/status" → "<root>/proc/1/status". `rel` may start with '/'.
  [[nodiscard]] std::string join(std::string_view rel) const;

  // Reads a whole file under the root (relative path). /proc files report size 0,
  // so this reads until EOF.
  [[nodiscard]] Result<std::string> read_file(std::string_view rel) const;
  // True if the path exists under the root (no symlink following beyond the kernel's).
  [[nodiscard]] bool exists(std::string_view rel) const;

 private:
  HostRoot(std::string root, UniqueFd fd)
      : root_(std::move(root)), fd_(std::make_shared<UniqueFd>(std::move(fd))) {}
  std::string root_;
  std::shared_ptr<UniqueFd> fd_;  // shared: HostRoot is cheap to copy into configs
};

// Reads everything from an open fd until EOF.
Result<std::string> read_all(int fd, std::string_view what);
// Reads a file relative to a directory fd; `what` names it in errors.
Result<std::string> read_file_at(int dir_fd, const char* rel, std::string_view what);

}  // namespace gpureap::sys
