// Processes the lab starts on the node (gpureap trace, runc, ...) and waiting
// for them. The lab is multithreaded, so everything here uses posix_spawn (no
// fork in a threaded process) and closes every inherited descriptor above
// stderr: a NVML descriptor of the lab's own must never reach a workload.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sys/error.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::lab {

using Clock = std::chrono::steady_clock;

// A process the lab started, with a pidfd that names it until it is reaped.
class Spawned {
 public:
  Spawned() = default;
  Spawned(pid_t pid, sys::UniqueFd pidfd) : pid_(pid), pidfd_(std::move(pidfd)) {}
  Spawned(Spawned&& other) noexcept;
  Spawned& operator=(Spawned&& other) noexcept;
  Spawned(const Spawned&) = delete;
  Spawned& operator=(const Spawned&) = delete;
  ~Spawned();  // SIGKILLs (by pidfd) and reaps a process still running

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] int pidfd() const { return pidfd_.get(); }
  [[nodiscard]] bool running() const { return pid_ > 0; }

  // Waits for the exit (poll on the pidfd), reaps, and returns the status as a
  // shell gives it (exit code, or 128 + signal); nullopt when `timeout` passed.
  std::optional<int> wait(std::optional<Clock::duration> timeout = std::nullopt);
  void kill_and_reap();

 private:
  pid_t pid_ = -1;
  sys::UniqueFd pidfd_;
};

// Starts argv[0] (an absolute path) with stdin on /dev/null and stdout/stderr
// on the given descriptors (-1: /dev/null). `env` is the whole environment.
sys::Result<Spawned> spawn(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, int stdout_fd, int stderr_fd);

// Runs to completion with output to files (created or truncated); the exit
// code as a shell gives it, or an error when it could not start or ran past `timeout`.
sys::Result<int> run_to_files(const std::vector<std::string>& argv,
                              const std::vector<std::string>& env, const std::string& stdout_path,
                              const std::string& stderr_path, Clock::duration timeout);

// The environment of this process plus `extra` (KEY=VALUE; a later KEY wins).
std::vector<std::string> environment_with(const std::vector<std::string>& extra);

// A shell's view of a wait status: the exit code, or 128 + the signal.
int shell_status(int wait_status);

// An absolute path for `name`: itself when it contains '/', else the first
// executable in `dirs`, then in $PATH. nullopt when none.
std::optional<std::string> find_program(const std::string& name,
                                        const std::vector<std::string>& dirs);

// Opens (O_CLOEXEC) for appending, creating it 0644.
sys::Result<sys::UniqueFd> open_log(const std::string& path);
// Opens (O_CLOEXEC) for writing from scratch, creating it 0644.
sys::Result<sys::UniqueFd> open_truncated(const std::string& path);
// Replaces `path`'s content with `text`; the error names the file.
sys::Status write_text_file(const std::string& path, std::string_view text);

}  // namespace gpureap::lab
