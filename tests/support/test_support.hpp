// Test support for integration tests: temporary trees, processes the test
// starts (and only those are ever killed), cgroups with kubelet's names, and
// running the gpureap binaries. Everything cleans up in destructors, so a
// failing assertion still leaves the machine as it was.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gpureap::testing {

class TempDir {
 public:
  TempDir();
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string operator/(const std::string& rel) const { return path_ + "/" + rel; }

 private:
  std::string path_;
};

void write_file(const std::string& path, const std::string& content);  // mkdir -p of the parent
std::string read_file(const std::string& path);
void make_dirs(const std::string& path);

// A process started by the test: argv exec'd with stdout on a pipe. The guard
// SIGKILLs and reaps it on destruction unless it was already reaped.
class Child {
 public:
  static Child spawn(const std::vector<std::string>& argv,
                     const std::vector<std::string>& extra_env = {});
  Child() = default;
  Child(Child&& other) noexcept;
  Child& operator=(Child&& other) noexcept;
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  ~Child();

  [[nodiscard]] pid_t pid() const { return pid_; }
  // Reads one line of the child's stdout (blocking, no timeout beyond the
  // child's own: a child that dies gives EOF and an empty optional).
  std::optional<std::string> read_line();
  void kill_and_reap();
  int wait_exit();  // waitpid; returns the raw status

 private:
  pid_t pid_ = -1;
  int out_fd_ = -1;
  std::string buffer_;
};

struct RunResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};
RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env = {});

// A cgroup directory created for the test in one hierarchy; processes moved in
// with add(). Destruction removes the directory (and its parents that the
// test created), after the test has killed its processes.
class Cgroup {
 public:
  // `mount` is the hierarchy root ("/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified"),
  // `path` the cgroup path as /proc/<pid>/cgroup shows it.
  Cgroup(std::string mount, std::string path);
  ~Cgroup();
  Cgroup(const Cgroup&) = delete;
  Cgroup& operator=(const Cgroup&) = delete;
  void add(pid_t pid) const;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string mount_;
  std::string path_;
  std::vector<std::string> created_;  // deepest last
};

// Where this machine mounts cgroup hierarchies: the v1 memory controller
// (nullopt on a v2-only host) and the v2 hierarchy (nullopt on v1-only).
std::optional<std::string> cgroup_v1_memory_mount();
std::optional<std::string> cgroup_v2_mount();

// A pseudo-random 64-hex container id and a pod UID, distinct per call.
std::string random_hex(std::size_t n);
std::string random_uuid();

}  // namespace gpureap::testing
