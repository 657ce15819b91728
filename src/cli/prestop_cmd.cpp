// gpureap prestop: the pod's preStop exec hook. SIGTERMs the GPU users of its
// own container through verified pidfds, waits until each has exited and the
// driver no longer lists its memory, SIGKILLs the rest when the TERM wait ends,
// and is done before the deadline. One log line per process, on stderr and on
// PID 1's stdout (what `kubectl logs` shows); --json for the lab.
#include <fcntl.h>
#include <fmt/format.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "cli/commands.hpp"
#include "cli/common.hpp"
#include "container/pod_resolver.hpp"
#include "gpu/backend.hpp"
#include "node/take.hpp"
#include "prestop/act.hpp"
#include "prestop/select.hpp"
#include "report/report.hpp"
#include "prestop/self.hpp"
#include "sys/host_root.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::cli {

namespace {

using nlohmann::json;

constexpr double kDefaultDeadline = 25.0;  // a bit under the default 30 s grace
constexpr double kKillMargin = 2.0;        // left after SIGKILL for the exit and the memory release

struct PrestopOptions {
  CommonOptions common;
  double deadline = kDefaultDeadline;
  std::optional<double> term_wait;
  unsigned release_poll_ms = 20;
  bool dry_run = false;
  bool include_pid1 = false;
  bool no_pid1_log = false;
};

// The default TERM wait: the deadline less a margin for SIGKILL and the memory
// release (2 s, or half the deadline when that is shorter).
double default_term_wait(double deadline) { return deadline - std::min(kKillMargin, deadline / 2); }

// Every line goes to stderr and, where it can be opened, to PID 1's stdout: the
// container's log, which `kubectl logs` shows (an exec hook's own output is not).
class Log {
 public:
  Log(const sys::HostRoot& root, bool to_pid1, pid_t self_pid) {
    if (!to_pid1 || self_pid == 1) return;
    // Non-blocking: a full or unread pipe must never hold the hook up.
    const std::string path = root.join("proc/1/fd/1");
    sys::UniqueFd fd(::open(path.c_str(), O_WRONLY | O_APPEND | O_NONBLOCK | O_CLOEXEC | O_NOCTTY));
    if (!fd) return;
    struct stat a {}, b {};
    // Already our stderr (run by hand in PID 1's terminal): once is enough.
    if (::fstat(fd.get(), &a) == 0 && ::fstat(STDERR_FILENO, &b) == 0 && a.st_dev == b.st_dev &&
        a.st_ino == b.st_ino) {
      return;
    }
    pid1_ = std::move(fd);
  }

  void line(const std::string& text) const {
    const std::string l = "gpureap prestop: " + text + "\n";
    write_all(STDERR_FILENO, l);
    if (pid1_) write_all(pid1_.get(), l);
  }
  [[nodiscard]] bool to_pid1() const { return pid1_.valid(); }

 private:
  // One write per line (atomic on a pipe up to PIPE_BUF); a short or failed write is dropped.
  static void write_all(int fd, const std::string& l) {
    std::size_t off = 0;
    while (off < l.size()) {
      const ssize_t n = ::write(fd, l.data() + off, l.size() - off);
      if (n <= 0) return;
      off += static_cast<std::size_t>(n);
    }
  }
  sys::UniqueFd pid1_;
};

json optional_number(const std::optional<double>& v) { return v ? json(*v) : json(nullptr); }

json to_json(const PrestopOptions& o, double term_wait, const prestop::SelfIdentity& self,
             const prestop::Selection& sel, const prestop::ActReport& rep, int exit_code, bool pid1_log) {
  json targets = json::array();
  unsigned exited = 0, killed = 0, survived = 0, not_signalled = 0;
  for (const auto& r : rep.results) {
    const auto& t = r.target;
    targets.push_back({{"pid", t.pid},
                       {"comm", t.comm},
                       {"start_time", t.start_time},
                       {"gpu_fds", t.gpu_fds},
                       {"devices", t.devices},
                       {"driver_pids", t.driver_pids},
                       {"gpu_memory_bytes", t.gpu_memory ? json(*t.gpu_memory) : json(nullptr)},
                       {"outcome", prestop::to_string(r.outcome)},
                       {"term_sent", r.term_sent},
                       {"kill_sent", r.kill_sent},
                       {"term_to_kill_s", optional_number(r.kill_after_s)},
                       {"term_to_exit_s", optional_number(r.exit_after_s)},
                       {"term_to_release_s", optional_number(r.release_after_s)},
                       {"memory_released", r.memory_released ? json(*r.memory_released) : json(nullptr)},
                       {"error", r.error}});
    switch (r.outcome) {
      case prestop::Outcome::exited: ++exited; break;
      case prestop::Outcome::killed: ++killed; break;
      case prestop::Outcome::survived: ++survived; break;
      default: ++not_signalled; break;
    }
  }
  json skipped = json::array();
  for (const auto& s : sel.skipped) {
    skipped.push_back({{"pid", s.pid ? json(*s.pid) : json(nullptr)},
                       {"driver_pid", s.driver_pid ? json(*s.driver_pid) : json(nullptr)},
                       {"comm", s.comm},
                       {"reason", prestop::to_string(s.reason)},
                       {"message", prestop::describe(s)}});
  }
  return {{"schema", 1},
          {"command", "prestop"},
          {"dry_run", o.dry_run},
          {"deadline_s", o.deadline},
          {"term_wait_s", term_wait},
          {"include_pid1", o.include_pid1},
          {"logged_to_pid1", pid1_log},
          {"self",
           {{"pid", self.pid},
            {"pid_namespace", self.pid_namespace},
            {"container_id", self.container_id ? json(*self.container_id) : json(nullptr)}}},
          {"targets", targets},
          {"skipped", skipped},
          {"summary",
           {{"targets", rep.results.size()},
            {"exited", exited},
            {"killed", killed},
            {"survived", survived},
            {"not_signalled", not_signalled}}},
          {"total_s", rep.total_s},
          {"exit_code", exit_code}};
}

// Exit 2 under --json still prints a report, so a caller parsing stdout
// learns why nothing was signalled instead of reading nothing.
int could_not_check(const PrestopOptions& o, const std::string& message) {
  if (o.common.json) {
    const json doc = {{"schema", 1},   {"command", "prestop"}, {"dry_run", o.dry_run},
                      {"targets", json::array()}, {"skipped", json::array()},
                      {"error", message}, {"exit_code", kExitCouldNotCheck}};
    fmt::print("{}\n", ::gpureap::report::json_text(doc));
    std::fflush(stdout);
  }
  return kExitCouldNotCheck;
}

std::chrono::milliseconds to_ms(double s) {
  return std::chrono::milliseconds(static_cast<long long>(std::llround(s * 1000.0)));
}

int run_prestop(const PrestopOptions& o) {
  const auto start = prestop::Clock::now();
  const double term_wait = o.term_wait.value_or(default_term_wait(o.deadline));
  if (!(o.deadline > 0) || !(term_wait >= 0) || term_wait > o.deadline) {
    const auto message = fmt::format("need 0 < --deadline ({}) and 0 <= --term-wait ({}) <= --deadline",
                                     o.deadline, term_wait);
    log_error("prestop: " + message);
    return could_not_check(o, message);
  }
  auto root = sys::HostRoot::open(sys::HostRoot::resolve_path(o.common.host_root));
  if (!root) {
    log_error("prestop: " + root.error().message);
    return could_not_check(o, root.error().message);
  }
  auto self = prestop::read_self_identity(*root);
  if (!self) {
    log_error("prestop: " + self.error().message);
    return could_not_check(o, self.error().message);
  }
  const Log log(*root, !o.no_pid1_log, self->pid);
  auto backend = gpu::make_backend(o.common.gpu, *root);
  if (!backend) {
    log.line("could not check: " + backend.error().message);
    return could_not_check(o, backend.error().message);
  }
  if (auto reason = (*backend)->unavailable_reason(); !reason.empty()) log.line(reason);
  // No pod resolvers: selection needs the container id, not the pod's name.
  const container::Resolvers no_resolvers;
  node::SnapshotOptions snap_options;
  snap_options.threads = effective_threads(o.common);
  snap_options.fd_source = fd_source(o.common);
  auto snap = node::take_snapshot(*root, **backend, no_resolvers, snap_options);
  if (!snap) {
    log.line("could not check: " + snap.error().message);
    return could_not_check(o, snap.error().message);
  }

  prestop::SelectOptions sel_options;
  sel_options.include_pid1 = o.include_pid1;
  const auto selection = prestop::select_targets(
      *snap, *self, [&](pid_t pid) { return prestop::read_pid_namespace(*root, pid); }, sel_options);

  log.line(fmt::format("start: {} target(s) in pid namespace {}{}; deadline {:.1f} s, SIGKILL {:.1f} s after "
                       "SIGTERM; gpu {}{}",
                       selection.targets.size(), self->pid_namespace,
                       self->container_id ? ", container " + self->container_id->substr(0, 12) : std::string(),
                       o.deadline, term_wait, snap->gpu_backend, o.dry_run ? "; dry run" : ""));
  for (const auto& s : selection.skipped) {
    if (s.reason != prestop::SkipReason::self) log.line(prestop::describe(s));
  }

  prestop::ActOptions act_options;
  act_options.start = start;
  act_options.deadline = to_ms(o.deadline);
  act_options.term_wait = to_ms(term_wait);
  act_options.release_poll = std::chrono::milliseconds(std::max(1U, o.release_poll_ms));
  act_options.dry_run = o.dry_run;
  gpu::GpuBackend& be = **backend;
  const prestop::ListedPids listed = [&be]() -> std::optional<std::vector<std::uint32_t>> {
    auto g = be.snapshot();
    if (!g) return std::nullopt;
    std::vector<std::uint32_t> pids;
    for (const auto& d : g->devices) {
      for (const auto& p : d.processes) pids.push_back(p.pid);
    }
    return pids;
  };
  const auto report = prestop::act(*root, selection.targets, listed, act_options,
                                   [&log](const std::string& l) { log.line(l); });

  const int exit_code = report.all_gone() ? kExitClean : kExitFindings;
  unsigned killed = 0, survived = 0;
  for (const auto& r : report.results) {
    killed += r.outcome == prestop::Outcome::killed ? 1U : 0U;
    survived += (r.outcome == prestop::Outcome::survived ||
                 (r.memory_released && !*r.memory_released)) ? 1U : 0U;
  }
  log.line(fmt::format("done in {:.3f} s: {} target(s), {} killed, {} survived or still listed; exit {}",
                       report.total_s, report.results.size(), killed, survived, exit_code));
  if (o.common.json) {
    fmt::print("{}\n", ::gpureap::report::json_text(to_json(o, term_wait, *self, selection, report, exit_code, log.to_pid1())));
    std::fflush(stdout);
  }
  return exit_code;
}

}  // namespace

void register_prestop(CLI::App& app, std::function<int()>& run) {
  auto opt = std::make_shared<PrestopOptions>();
  CLI::App* cmd = app.add_subcommand(
      "prestop",
      "preStop hook: SIGTERM this container's GPU processes (through pidfds, never PID 1), wait for "
      "their exit and GPU memory release, SIGKILL the rest, all before --deadline");
  add_common_options(*cmd, opt->common);
  cmd->add_option("--deadline", opt->deadline,
                  "Seconds from the hook's start by which everything is done; set it a bit under the "
                  "pod's terminationGracePeriodSeconds (default 25: under the default 30 s grace)")
      ->capture_default_str();
  cmd->add_option("--term-wait", opt->term_wait,
                  "Seconds between SIGTERM and SIGKILL (default: the deadline less 2 s, or less half "
                  "the deadline when that is shorter)");
  cmd->add_option("--release-poll-ms", opt->release_poll_ms,
                  "How often the driver is re-read while an exited process's memory is still listed")
      ->capture_default_str();
  cmd->add_flag("--dry-run", opt->dry_run, "Identify and log the targets; signal nothing");
  cmd->add_flag("--include-pid1", opt->include_pid1,
                "Also signal the container's PID 1 when it uses the GPU (the runtime signals it anyway)");
  cmd->add_flag("--no-pid1-log", opt->no_pid1_log,
                "Log to stderr only, not also to PID 1's stdout (/proc/1/fd/1)");
  cmd->callback([opt, &run] { run = [opt] { return run_prestop(*opt); }; });
}

}  // namespace gpureap::cli
