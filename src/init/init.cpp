// gpureap-init: a tini-compatible container init that also gives the GPU back.
//
// One function per step, in tini's order: parse the configuration, configure
// signals, set the parent-death signal, check that we can reap, spawn the
// child, then loop { wait for one signal (sigtimedwait, so no work ever runs in
// a handler) -> forward it or start the shutdown; reap every zombie; during a
// shutdown, sweep the descendant tree: SIGTERM newcomers, SIGKILL whoever
// outlived its grace }. Every process we signal is named by a pidfd that was
// checked against the scanned process (start time, parent), so a reused pid is
// never hit, and only our own descendants are ever scanned.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <termios.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdint>
#include <ctime>

#include "init/log.hpp"
#include "init/options.hpp"
#include "init/pidfd.hpp"
#include "init/proc_tree.hpp"
#include "init/vec.hpp"

namespace gpureap::init {

namespace {

constexpr int64_t kSecond = 1'000'000'000;
constexpr int64_t kSweepInterval = 100'000'000;  // rescan the tree every 100 ms while shutting down
// The first sweep after a shutdown signal waits this long, or until the main
// child has been reaped: a child that exits promptly and leaves nothing behind
// (the common case) then costs no /proc scan at all, which keeps the
// signal-to-exit latency at tini's. The rest of the tree gets its SIGTERM at
// most this much later, which is nothing against a grace of seconds.
constexpr int64_t kFirstSweepDelay = 20'000'000;

int64_t now_ns() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);  // cannot fail for CLOCK_MONOTONIC
  return static_cast<int64_t>(ts.tv_sec) * kSecond + ts.tv_nsec;
}

double seconds(int64_t ns) { return static_cast<double>(ns) / static_cast<double>(kSecond); }

bool is_shutdown_signal(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGQUIT; }

// A descendant we have sent the shutdown signal to.
struct Tracked {
  pid_t pid;      // /proc numbering
  pid_t nspid;    // our numbering
  uint64_t start;
  int pidfd;      // owned unless is_main
  bool is_main;
  bool killed;
  bool gpu;       // held a GPU descriptor when last looked at
  unsigned seen;  // sweep generation that last saw it
  int64_t termed_at;
  char comm[17];
};

struct SignalConfig {
  sigset_t wait_set;          // everything: taken synchronously by sigtimedwait
  sigset_t child_mask;        // the mask we were started with, restored in the child
  struct sigaction child_ttin;  // dispositions we were started with, restored in the child
  struct sigaction child_ttou;
};

class Init {
 public:
  Init(const Config& cfg, const Log& log) : cfg_(cfg), log_(log) {}
  ~Init();
  Init(const Init&) = delete;
  Init& operator=(const Init&) = delete;

  int main();

 private:
  bool configure_signals();
  bool set_parent_death_signal();
  bool check_reaper();
  bool spawn_child();
  [[noreturn]] void exec_child();
  int loop();
  timespec wait_timeout(int64_t now) const;
  void handle_signal(int sig, const siginfo_t& info);
  void forward(int sig);
  bool send_main(int sig);
  void begin_shutdown(int sig);
  void sweep(int64_t now);
  void sweep_entry(const ProcEntry& e, const Vec<ProcEntry>& scanned, int64_t now);
  bool reap_zombies();
  int exit_code() const;
  bool send(int pidfd, pid_t nspid, int sig) const;

  const Config& cfg_;
  Log log_;
  ProcView proc_;
  SignalConfig sig_{};

  pid_t child_ = 0;          // our numbering
  pid_t child_proc_pid_ = 0;  // /proc numbering, once seen in a scan (its pgid under -g)
  int child_pidfd_ = -1;
  bool child_reaped_ = false;
  int child_status_ = 0;
  bool have_children_ = true;

  bool shutting_down_ = false;
  int shutdown_sig_ = 0;  // 0: cleanup after the main child exited on its own
  int64_t t0_ = 0;
  int64_t next_sweep_ = INT64_MAX;  // the interval tick or the earliest deadline, whichever comes first
  bool swept_ = false;
  unsigned generation_ = 0;
  Vec<Tracked> tracked_;
  Vec<ProcEntry> scanned_;
};

Init::~Init() {
  for (Tracked& t : tracked_) {
    if (!t.is_main && t.pidfd >= 0) ::close(t.pidfd);
  }
  if (child_pidfd_ >= 0) ::close(child_pidfd_);
}

// Step: block every signal so that the main loop takes them one at a time with
// sigtimedwait. Synchronous faults (SEGV, BUS, ...) still kill us: the kernel
// unblocks a fault signal it forces. SIGTTIN/SIGTTOU are also ignored, as in
// tini, so that writing to a TTY whose foreground group is the child never stops us.
bool Init::configure_signals() {
  if (::sigfillset(&sig_.wait_set) != 0) {
    log_.print(Level::kFatal, "sigfillset: %s", errno_name(errno));
    return false;
  }
  if (::sigprocmask(SIG_SETMASK, &sig_.wait_set, &sig_.child_mask) != 0) {
    log_.print(Level::kFatal, "sigprocmask: %s", errno_name(errno));
    return false;
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigemptyset(&ignore.sa_mask);
  if (::sigaction(SIGTTIN, &ignore, &sig_.child_ttin) != 0 || ::sigaction(SIGTTOU, &ignore, &sig_.child_ttou) != 0) {
    log_.print(Level::kFatal, "sigaction(SIGTTIN/SIGTTOU): %s", errno_name(errno));
    return false;
  }
  return true;
}

// Step: -p SIGNAL, the signal we get when our parent dies.
bool Init::set_parent_death_signal() {
  if (cfg_.parent_death_signal == 0) return true;
  if (::prctl(PR_SET_PDEATHSIG, static_cast<unsigned long>(cfg_.parent_death_signal)) != 0) {
    log_.print(Level::kFatal, "prctl(PR_SET_PDEATHSIG): %s", errno_name(errno));
    return false;
  }
  return true;
}

// Step: as PID 1 orphans come to us anyway. Anywhere else we register as a
// child subreaper: the shutdown must reach orphans too, so we do it even
// without -s, but warn as tini does when it was not asked for.
bool Init::check_reaper() {
  if (::getpid() == 1 && !cfg_.subreaper) return true;
  if (::getpid() != 1 && !cfg_.subreaper) {
    log_.print(Level::kWarn,
               "gpureap-init is not running as PID 1 and was not asked to be a child subreaper; registering as "
               "one anyway so that orphans are re-parented to it and reaped. Use -s or set TINI_SUBREAPER to make "
               "this explicit, or run gpureap-init as PID 1.");
  }
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1UL) != 0) {
    int err = errno;
    if (cfg_.subreaper) {
      log_.print(Level::kFatal, "prctl(PR_SET_CHILD_SUBREAPER): %s (Linux >= 3.4 is needed)", errno_name(err));
      return false;
    }
    log_.print(Level::kWarn, "prctl(PR_SET_CHILD_SUBREAPER): %s: orphans will not be reaped", errno_name(err));
    return true;
  }
  log_.print(Level::kDebug, "registered as a child subreaper");
  return true;
}

// In the child, before exec: own process group, the TTY's foreground if there is
// one (done here, not in the parent, so a nested init cannot race us), then our
// original signal mask and SIGTTIN/SIGTTOU dispositions. Ignored signals stay
// ignored across exec, as with tini.
void Init::exec_child() {
  log_.pid = ::getpid();
  if (::setpgid(0, 0) != 0) {
    log_.print(Level::kFatal, "setpgid: %s", errno_name(errno));
    ::_exit(1);
  }
  if (::tcsetpgrp(STDIN_FILENO, ::getpgrp()) != 0) {
    // ENOTTY: stdin is no terminal; ENXIO: no such device (lx zones); EBADF: stdin closed.
    if (errno != ENOTTY && errno != ENXIO && errno != EBADF) {
      log_.print(Level::kFatal, "tcsetpgrp: %s", errno_name(errno));
      ::_exit(1);
    }
  }
  if (::sigaction(SIGTTIN, &sig_.child_ttin, nullptr) != 0 || ::sigaction(SIGTTOU, &sig_.child_ttou, nullptr) != 0 ||
      ::sigprocmask(SIG_SETMASK, &sig_.child_mask, nullptr) != 0) {
    log_.print(Level::kFatal, "restoring signal state: %s", errno_name(errno));
    ::_exit(1);
  }
  ::execvp(cfg_.child_argv[0], cfg_.child_argv);
  int err = errno;
  int status = err == ENOENT ? 127 : err == EACCES ? 126 : 1;
  log_.print(Level::kFatal, "exec %s failed: %s", cfg_.child_argv[0], errno_name(err));
  ::_exit(status);
}

// Step: fork the child and take a pidfd for it. The child stays unreaped until
// we reap it, so its pid cannot be reused before pidfd_open.
bool Init::spawn_child() {
  pid_t pid = ::fork();
  if (pid < 0) {
    log_.print(Level::kFatal, "fork: %s", errno_name(errno));
    return false;
  }
  if (pid == 0) exec_child();
  child_ = pid;
  child_pidfd_ = pidfd_open(pid);
  if (child_pidfd_ < 0) {
    // ENOSYS (kernel < 5.3): fall back to kill(), safe while the child is unreaped.
    log_.print(Level::kWarn, "pidfd_open(%d): %s; signalling the child by pid", static_cast<int>(pid),
               errno_name(errno));
  }
  log_.print(Level::kInfo, "spawned child process '%s' with pid '%d'", cfg_.child_argv[0], static_cast<int>(pid));
  return true;
}

bool Init::send(int pidfd, pid_t nspid, int sig) const {
  if (pidfd_send_signal(pidfd, sig) == 0) return true;
  // ESRCH: exited (perhaps not reaped yet); nothing to do.
  if (errno != ESRCH) {
    log_.print(Level::kWarn, "pidfd_send_signal(pid %d, %d): %s", static_cast<int>(nspid), sig, errno_name(errno));
  }
  return false;
}

bool Init::send_main(int sig) {
  if (child_reaped_) return false;
  if (child_pidfd_ >= 0) return send(child_pidfd_, child_, sig);
  if (::kill(child_, sig) == 0) return true;
  if (errno != ESRCH) log_.print(Level::kWarn, "kill(%d, %d): %s", static_cast<int>(child_), sig, errno_name(errno));
  return false;
}

// Forward a signal as tini does: to the child, or with -g to every process of
// its process group (each one a verified descendant, each by pidfd).
void Init::forward(int sig) {
  if (child_reaped_) {
    log_.print(Level::kDebug, "not forwarding signal %d: the child has exited", sig);
    return;
  }
  log_.print(Level::kDebug, "passing on signal %d", sig);
  send_main(sig);
  if (!cfg_.kill_group) return;
  if (!proc_.scan(scanned_)) return;
  for (const ProcEntry& e : scanned_) {
    if (e.nspid == child_) child_proc_pid_ = e.pid;
  }
  for (const ProcEntry& e : scanned_) {
    if (e.nspid == child_ || e.pgrp != child_proc_pid_ || e.state == 'Z' || child_proc_pid_ == 0) continue;
    int fd = proc_.open_verified(e, scanned_, log_);
    if (fd < 0) continue;
    send(fd, e.nspid, sig);
    ::close(fd);
  }
}

// SIGTERM/SIGINT/SIGQUIT (sig != 0), or the main child's exit (sig == 0): the
// main child (and with -g its group) gets `sig` at once; the sweep gives every
// other descendant SIGTERM and starts the grace clocks.
void Init::begin_shutdown(int sig) {
  shutting_down_ = true;
  shutdown_sig_ = sig;
  t0_ = now_ns();
  if (sig != 0) {
    log_.print(Level::kInfo, "signal %d: shutting down (grace %.3f s, GPU grace %.3f s)", sig, seconds(cfg_.grace_ns),
               seconds(cfg_.gpu_grace_ns));
    send_main(sig);
    if (cfg_.kill_group) {
      sweep(t0_);  // the group gets the signal now, as with tini's kill(-pgid)
    } else {
      next_sweep_ = t0_ + kFirstSweepDelay;
    }
  } else {
    log_.print(Level::kInfo, "main child exited: terminating what is left of its tree");
    sweep(t0_);
  }
}

void Init::sweep_entry(const ProcEntry& e, const Vec<ProcEntry>& scanned, int64_t now) {
  Tracked* t = nullptr;
  for (Tracked& c : tracked_) {
    if (c.pid == e.pid && c.start == e.start) t = &c;
  }
  if (t == nullptr) {
    if (e.state == 'Z' || e.state == 'X') return;  // already dead; its parent (or we) will reap it
    Tracked n{};
    n.pid = e.pid;
    n.nspid = e.nspid;
    n.start = e.start;
    n.is_main = !child_reaped_ && e.nspid == child_;
    n.termed_at = now;
    __builtin_memcpy(n.comm, e.comm, sizeof n.comm);
    if (n.is_main) {
      n.pidfd = child_pidfd_;
      child_proc_pid_ = e.pid;
      n.termed_at = t0_;
    } else {
      n.pidfd = proc_.open_verified(e, scanned, log_);
      if (n.pidfd < 0) return;  // gone, or no longer ours
      bool in_group = cfg_.kill_group && child_proc_pid_ != 0 && e.pgrp == child_proc_pid_;
      int sig = shutdown_sig_ != 0 && in_group ? shutdown_sig_ : SIGTERM;
      send(n.pidfd, n.nspid, sig);
      if (e.state == 'T' || e.state == 't') send(n.pidfd, n.nspid, SIGCONT);  // a stopped process cannot act on it
      log_.print(Level::kDebug, "sent signal %d to pid %d (%s)", sig, static_cast<int>(n.nspid), n.comm);
    }
    if (!tracked_.push(n)) {
      if (!n.is_main) ::close(n.pidfd);
      return;
    }
    t = &tracked_[tracked_.size() - 1];
  }
  t->seen = generation_;
  if (t->killed || e.state == 'Z' || e.state == 'X') return;
  t->gpu = proc_.holds_gpu(e.pid, cfg_);
  int64_t deadline = t0_ + (t->gpu ? cfg_.gpu_grace_ns : cfg_.grace_ns);
  if (now < deadline) {
    if (deadline < next_sweep_) next_sweep_ = deadline;
    return;
  }
  if (t->pidfd >= 0 ? send(t->pidfd, t->nspid, SIGKILL) : (t->is_main && send_main(SIGKILL))) {
    log_.print(Level::kWarn, "escalated: SIGKILL pid=%d comm=%s after=%.3fs gpu=%s limit=%s", static_cast<int>(t->nspid),
               t->comm, seconds(now - t->termed_at), t->gpu ? "yes" : "no", t->gpu ? "--gpu-grace" : "--grace");
  }
  t->killed = true;
}

// One pass over the tree while shutting down.
void Init::sweep(int64_t now) {
  swept_ = true;
  next_sweep_ = now + kSweepInterval;
  ++generation_;
  if (proc_.scan(scanned_)) {
    for (const ProcEntry& e : scanned_) {
      if (!child_reaped_ && e.nspid == child_) child_proc_pid_ = e.pid;  // the group id -g targets
    }
    for (const ProcEntry& e : scanned_) sweep_entry(e, scanned_, now);
  } else if (!child_reaped_) {
    // No /proc: we can still bring down the main child.
    ProcEntry e;
    e.pid = child_;
    e.nspid = child_;
    e.state = 'S';
    __builtin_memcpy(e.comm, "main", 5);
    sweep_entry(e, scanned_, now);
  }
  tracked_.keep_if([this](Tracked& t) {
    if (t.seen == generation_) return true;
    if (!t.is_main && t.pidfd >= 0) ::close(t.pidfd);
    if (!t.killed) {
      log_.print(Level::kInfo, "pid %d (%s) exited %.3f s after its SIGTERM", static_cast<int>(t.nspid), t.comm,
                 seconds(now_ns() - t.termed_at));
    }
    return false;
  });
}

// Step: reap every zombie that is ours. Remembers whether any child remains:
// as PID 1 or subreaper, "no child" means "no descendant", because orphans are
// re-parented to us before their parent can be reaped.
bool Init::reap_zombies() {
  for (;;) {
    int status = 0;
    pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid > 0) {
      if (pid == child_) {
        child_reaped_ = true;
        child_status_ = status;
        if (child_pidfd_ >= 0) ::close(child_pidfd_);
        child_pidfd_ = -1;
        for (Tracked& t : tracked_) {
          if (t.is_main) t.pidfd = -1;
        }
        log_.print(Level::kInfo, "main child exited (wait status 0x%x)", static_cast<unsigned>(status));
      } else {
        log_.print(cfg_.warn_on_reap ? Level::kWarn : Level::kDebug, "Reaped zombie process with pid=%d",
                   static_cast<int>(pid));
      }
      continue;
    }
    if (pid == 0) {
      have_children_ = true;
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == ECHILD) {
      have_children_ = false;
      return true;
    }
    log_.print(Level::kFatal, "waitpid: %s", errno_name(errno));
    return false;
  }
}

// tini's exit code: the child's code, 128+signal, then -e remapping to 0.
int Init::exit_code() const {
  int code = 1;
  if (WIFEXITED(child_status_)) {
    code = WEXITSTATUS(child_status_);
  } else if (WIFSIGNALED(child_status_)) {
    code = 128 + WTERMSIG(child_status_);
  }
  code %= 256;
  return remapped(cfg_, code) ? 0 : code;
}

void Init::handle_signal(int sig, const siginfo_t& info) {
  if (sig == SIGCHLD) return;  // the reap step follows every wake-up
  if (info.si_code == SI_USER && info.si_pid == log_.pid) {
    return;  // raised by the kernel on our behalf (SIGPIPE, SIGXFSZ from our own writes): not for the child
  }
  if (is_shutdown_signal(sig) && !shutting_down_) {
    begin_shutdown(sig);
    return;
  }
  forward(sig);
}

timespec Init::wait_timeout(int64_t now) const {
  int64_t wait = kSecond;  // as tini: wake up at least once a second to reap
  if (shutting_down_) {
    wait = next_sweep_ - now;
    if (wait < 0) wait = 0;
    if (wait > kSecond) wait = kSecond;
  }
  return timespec{static_cast<time_t>(wait / kSecond), static_cast<long>(wait % kSecond)};
}

int Init::loop() {
  for (;;) {
    timespec timeout = wait_timeout(now_ns());
    siginfo_t info{};
    int sig = ::sigtimedwait(&sig_.wait_set, &info, &timeout);
    if (sig > 0) {
      handle_signal(sig, info);
    } else if (errno != EAGAIN && errno != EINTR) {  // EAGAIN: timeout; EINTR: SIGSTOP/SIGCONT
      log_.print(Level::kFatal, "sigtimedwait: %s", errno_name(errno));
      return 1;
    }
    if (!reap_zombies()) return 1;
    if (child_reaped_ && !have_children_) return exit_code();
    if (child_reaped_ && !shutting_down_) {
      begin_shutdown(0);
      continue;
    }
    if (shutting_down_) {
      int64_t now = now_ns();
      if (now >= next_sweep_ || (child_reaped_ && !swept_)) sweep(now);
    }
  }
}

int Init::main() {
  if (!configure_signals()) return 1;
  if (!set_parent_death_signal()) return 1;
  if (!check_reaper()) return 1;
  proc_.open(log_);
  if (!spawn_child()) return 1;
  return loop();
}

}  // namespace

}  // namespace gpureap::init

int main(int argc, char** argv) {
  using namespace gpureap::init;
  Config cfg;
  switch (parse_config(argc, argv, cfg)) {
    case ParseOutcome::kExitSuccess: return 0;
    case ParseOutcome::kExitFailure: return 1;
    case ParseOutcome::kRun: break;
  }
  Log log;
  log.verbosity = cfg.verbosity;
  log.pid = ::getpid();
  Init init(cfg, log);
  return init.main();
}
