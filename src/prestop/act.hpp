// The preStop action: SIGTERM every target through a verified pidfd, wait on
// the pidfds (poll: no sleeps) until each has exited and the driver no longer
// lists its memory, SIGKILL whatever is left when the TERM wait ends, and be
// done by the deadline. Each target's outcome is measured from its SIGTERM.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "prestop/select.hpp"
#include "sys/host_root.hpp"

namespace gpureap::prestop {

using Clock = std::chrono::steady_clock;

struct ActOptions {
  Clock::time_point start;                      // when the hook started: the deadline counts from here
  std::chrono::milliseconds deadline{25000};    // everything done by start + deadline
  std::chrono::milliseconds term_wait{23000};   // SIGKILL this long after SIGTERM (at the latest the deadline)
  std::chrono::milliseconds release_poll{20};   // re-read the driver this often while memory is pending
  bool dry_run = false;                         // identify, log what would be done, signal nothing
};

enum class Outcome {
  exited,              // exited after SIGTERM
  killed,              // SIGTERM was not enough; exited after SIGKILL
  survived,            // still running at the deadline (D state, or a signal we could not send)
  gone,                // had exited before we could signal it
  pid_reused,          // the pid now names another process: not signalled
  not_identified,      // could not be verified (stat unreadable, pidfd_open failed): not signalled
  dry_run,             // identified; --dry-run signals nothing
};
std::string_view to_string(Outcome o);

struct TargetResult {
  Target target;
  Outcome outcome = Outcome::survived;
  bool term_sent = false;
  bool kill_sent = false;
  std::optional<double> kill_after_s;     // SIGTERM to SIGKILL
  std::optional<double> exit_after_s;     // SIGTERM to exit
  std::optional<double> release_after_s;  // SIGTERM to the driver no longer listing it
  // true: no longer listed (or never listed: the driver says nothing); false:
  // still listed at the deadline; nullopt: not signalled.
  std::optional<bool> memory_released;
  std::string error;  // why it was not identified / a signal failed
};
// One log line (without the "gpureap prestop: " prefix).
std::string describe(const TargetResult& r);

struct ActReport {
  std::vector<TargetResult> results;  // in target order
  double total_s = 0;                 // start to done
  // true when every target is gone and its memory no longer listed (or none existed)
  [[nodiscard]] bool all_gone() const;
};

// The driver's PIDs listed right now, or nullopt when the driver could not be read.
using ListedPids = std::function<std::optional<std::vector<std::uint32_t>>()>;
// Receives each log line as it happens.
using LogSink = std::function<void(const std::string&)>;

// Verifies each target (pid + start time → pidfd; a changed start time is a
// reused pid and is never signalled), then TERM, wait, KILL, wait.
ActReport act(const sys::HostRoot& root, const std::vector<Target>& targets, const ListedPids& listed,
              const ActOptions& options, const LogSink& log);

}  // namespace gpureap::prestop
