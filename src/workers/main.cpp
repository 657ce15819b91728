// gpureap-worker: the scenario workloads of the lab and the tests. Each mode
// prints ONE JSON line on stdout when it is ready (so a caller waits on that
// line, never on a sleep); logs go to stderr. Statically linked so it runs in a
// bare runc rootfs; depends on libc, src/sys and the sim client only.
#include <fcntl.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <ctime>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/sim_client.hpp"
#include "workers/cuda_driver.hpp"

namespace {

namespace sim = gpureap::gpu::sim;
using gpureap::sys::Error;
using gpureap::sys::Result;

constexpr int kExitError = 1;
constexpr int kExitNoCuda = 2;  // libcuda.so.1 missing: the caller may fall back to sim
constexpr int kExitUsage = 64;  // EX_USAGE

constexpr const char* kHelp = R"(usage: gpureap-worker MODE [options]

Modes (each prints one JSON line on stdout when ready, or {"event":"error"} when
it fails; logs on stderr):
  hold --gpu sim|cuda [--device N] [--bytes B] [--sm-util P] [--ignore-term | --term-cleanup]
      Create a GPU context holding B bytes on device N, then pause forever.
      --sm-util P     the SM utilization (0-100) the simulated driver reports
                      for it (sim only; default 0: an idle holder)
      --ignore-term   SIGTERM set to SIG_IGN (the plan's bad worker)
      --term-cleanup  on SIGTERM print {"event":"sigterm"}, release the context
                      and exit 0 (the fixed worker)
  fork-after-init --gpu sim|cuda [--device N] [--bytes B] [--children N] [--ignore-term]
      Create a context, then fork N children (default 1) that inherit its
      descriptors without exec (a preforking server) and pause; all pause.
      Prints every pid.
  parent [--exit-after-spawn | --exit-after S] [--count N] -- CHILD ARGV...
      Spawn N copies of the child (default 1); with --exit-after-spawn exit at
      once without waiting, with --exit-after S exit after S seconds without
      waiting (the children become orphans: the plan's parent.py), else wait
      for them and exit with the last one's status.
  zombie-maker [--count N]
      Fork N children that exit at once; never reap them; pause.
  spawn-tree [--children N] [--setsid]
      Fork N children that pause; with --setsid each starts its own session
      (escapes the caller's process group and session). The parent pauses.
  init-sim [--devices N]
      Initialise the sim directory (idempotent; the first config wins).

Common options:
  --tag TEXT        ignored: text a test puts in the command line (redaction tests)
  --sim-dir DIR     sim directory (else $GPUREAP_SIM_DIR, else
                    $GPUREAP_HOST_ROOT/run/gpureap/sim, else /run/gpureap/sim)
  --sim-devices N   devices created when hold/fork-after-init find the sim
                    directory uninitialised (default 1)
--gpu cuda loads libcuda.so.1 with dlopen; on a real GPU host run the
gpureap-worker-dynamic build (a static binary cannot reliably dlopen libcuda).
B accepts the suffixes K, M, G (binary).  Exit codes: 0 ok, 1 error,
2 libcuda.so.1 missing (--gpu cuda), 64 usage.
)";

struct Options {
  std::string mode;
  std::string gpu = "sim";
  unsigned device = 0;
  std::uint64_t bytes = 256ULL * sim::kMiB;
  bool ignore_term = false;
  bool term_cleanup = false;
  bool exit_after_spawn = false;
  std::optional<double> exit_after_s;
  bool setsid = false;
  unsigned count = 1;
  std::optional<std::string> sim_dir;
  unsigned sim_devices = 1;
  unsigned sm_util = 0;
  std::vector<std::string> child_argv;
};

void log(const std::string& msg) {
  std::string line = "gpureap-worker[" + std::to_string(::getpid()) + "]: " + msg + "\n";
  [[maybe_unused]] ssize_t n = ::write(STDERR_FILENO, line.data(), line.size());
}

// One write(2) per line: lines of a parent and its children never interleave.
void emit(const std::string& json) {
  std::string line = json + "\n";
  [[maybe_unused]] ssize_t n = ::write(STDOUT_FILENO, line.data(), line.size());
}

std::string quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out.push_back('\\');
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
      out += buf;
      continue;
    }
    out.push_back(c);
  }
  return out + "\"";
}

std::string pid_list(const std::vector<pid_t>& pids) {
  std::string out = "[";
  for (std::size_t i = 0; i < pids.size(); ++i) out += (i ? "," : "") + std::to_string(pids[i]);
  return out + "]";
}

template <class T>
std::optional<T> number(std::string_view s) {
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

// Non-negative seconds with an optional fraction ("5", "0.5").
std::optional<double> seconds(std::string_view s) {
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || !(v >= 0) || v > 86400) return std::nullopt;
  return v;
}

std::optional<std::uint64_t> parse_bytes(std::string_view s) {
  std::uint64_t mult = 1;
  if (!s.empty()) {
    switch (s.back()) {
      case 'K': case 'k': mult = 1ULL << 10; break;
      case 'M': case 'm': mult = 1ULL << 20; break;
      case 'G': case 'g': mult = 1ULL << 30; break;
      default: break;
    }
    if (mult != 1) s.remove_suffix(1);
  }
  auto n = number<std::uint64_t>(s);
  if (!n || *n > UINT64_MAX / mult) return std::nullopt;
  return *n * mult;
}

Result<Options> parse_args(int argc, char** argv) {
  Options o;
  if (argc < 2) return Error{0, "missing MODE (see --help)"};
  o.mode = argv[1];
  auto need = [&](int& i, std::string_view flag) -> Result<std::string_view> {
    if (i + 1 >= argc) return Error{0, std::string(flag) + " needs a value"};
    return std::string_view(argv[++i]);
  };
  for (int i = 2; i < argc; ++i) {
    std::string_view a = argv[i];
    auto bad = [&](std::string_view v) { return Error{0, "bad value for " + std::string(a) + ": '" + std::string(v) + "'"}; };
    if (a == "--") {
      for (int j = i + 1; j < argc; ++j) o.child_argv.emplace_back(argv[j]);
      break;
    }
    if (a == "--ignore-term") { o.ignore_term = true; continue; }
    if (a == "--term-cleanup") { o.term_cleanup = true; continue; }
    if (a == "--exit-after-spawn") { o.exit_after_spawn = true; continue; }
    if (a == "--setsid") { o.setsid = true; continue; }
    if (a == "--gpu" || a == "--device" || a == "--bytes" || a == "--sim-dir" || a == "--sim-devices" ||
        a == "--count" || a == "--children" || a == "--devices" || a == "--exit-after" || a == "--sm-util" ||
        a == "--tag") {
      auto v = need(i, a);
      if (!v) return v.error();
      if (a == "--tag") continue;
      if (a == "--gpu") {
        if (*v != "sim" && *v != "cuda") return bad(*v);
        o.gpu = std::string(*v);
      } else if (a == "--sim-dir") {
        o.sim_dir = std::string(*v);
      } else if (a == "--exit-after") {
        auto secs = seconds(*v);
        if (!secs) return bad(*v);
        o.exit_after_s = *secs;
      } else if (a == "--bytes") {
        auto b = parse_bytes(*v);
        if (!b) return bad(*v);
        o.bytes = *b;
      } else {
        auto n = number<unsigned>(*v);
        if (!n) return bad(*v);
        if (a == "--sm-util" && *n > 100) return bad(*v);
        if (a == "--device") o.device = *n;
        else if (a == "--sm-util") o.sm_util = *n;
        else if (a == "--sim-devices" || a == "--devices") o.sim_devices = *n;
        else o.count = *n;  // --count, --children
      }
      continue;
    }
    return Error{0, "unknown option '" + std::string(a) + "' for mode " + o.mode};
  }
  if (o.ignore_term && o.term_cleanup) return Error{0, "--ignore-term and --term-cleanup exclude each other"};
  if (o.exit_after_spawn && o.exit_after_s) return Error{0, "--exit-after-spawn and --exit-after exclude each other"};
  if (o.sm_util != 0 && o.gpu != "sim") return Error{0, "--sm-util is for the simulated GPU (a CUDA worker's utilization is real)"};
  return o;
}

std::string sim_dir(const Options& o) {
  const char* root = std::getenv("GPUREAP_HOST_ROOT");
  return sim::resolve_sim_dir(o.sim_dir, root != nullptr ? root : "/");
}

// Whatever holds the GPU: the sim device or a real CUDA context.
struct Holding {
  std::optional<sim::Context> sim_ctx;
  std::optional<gpureap::workers::CudaHold> cuda;
  gpureap::sys::Status release() {
    if (sim_ctx) return sim_ctx->release();
    if (cuda) return cuda->release();
    return gpureap::sys::Ok{};
  }
  [[nodiscard]] std::string describe() const {
    return sim_ctx ? ",\"context\":" + quote(sim_ctx->path()) : std::string();
  }
};

Result<Holding> acquire(const Options& o) {
  Holding h;
  if (o.gpu == "cuda") {
    auto c = gpureap::workers::cuda_hold(o.device, o.bytes);
    if (!c) return c.error();
    h.cuda.emplace(std::move(*c));
    return h;
  }
  const std::string dir = sim_dir(o);
  if (auto st = sim::init_sim_dir(dir, sim::default_config(o.sim_devices)); !st) return st.error();
  auto c = sim::create_context(dir, o.device, o.bytes, o.sm_util);
  if (!c) return c.error();
  h.sim_ctx.emplace(std::move(*c));
  return h;
}

int fail(const Error& e, const Options& o) {
  log("error: " + e.message);
  // Also on stdout, where a caller waiting for the ready line reads it: it
  // need not wait for a line that will never come.
  emit("{\"event\":\"error\",\"pid\":" + std::to_string(::getpid()) + ",\"message\":" + quote(e.message) + "}");
  return (o.gpu == "cuda" && e.code == ENOENT && e.message.find("libcuda") != std::string::npos) ? kExitNoCuda
                                                                                                 : kExitError;
}

[[noreturn]] void pause_forever() {
  sigset_t none;
  sigemptyset(&none);
  for (;;) ::sigsuspend(&none);
}

int mode_hold(const Options& o) {
  sigset_t term;
  sigemptyset(&term);
  sigaddset(&term, SIGTERM);
  if (o.ignore_term) ::signal(SIGTERM, SIG_IGN);
  // --term-cleanup takes SIGTERM synchronously (blocked + sigwaitinfo): the
  // cleanup runs in normal code, not in a signal handler. Blocked before the
  // context exists, so an early SIGTERM waits for us instead of killing us.
  if (o.term_cleanup) ::sigprocmask(SIG_BLOCK, &term, nullptr);
  auto h = acquire(o);
  if (!h) return fail(h.error(), o);
  emit("{\"mode\":\"hold\",\"pid\":" + std::to_string(::getpid()) + ",\"gpu\":" + quote(o.gpu) +
       ",\"device\":" + std::to_string(o.device) + ",\"bytes\":" + std::to_string(o.bytes) + h->describe() +
       ",\"sigterm\":" + quote(o.ignore_term ? "ignore" : o.term_cleanup ? "cleanup" : "default") + "}");
  if (!o.term_cleanup) pause_forever();
  for (;;) {
    if (::sigwaitinfo(&term, nullptr) == SIGTERM) break;
  }
  // On stdout, so whoever reads the ready line also learns the SIGTERM reached us.
  emit("{\"event\":\"sigterm\",\"pid\":" + std::to_string(::getpid()) + "}");
  log("SIGTERM: releasing the context");
  if (auto st = h->release(); !st) return fail(st.error(), o);
  emit("{\"event\":\"released\",\"pid\":" + std::to_string(::getpid()) + "}");
  log("released; exiting 0");
  return 0;
}

int mode_fork_after_init(const Options& o) {
  if (o.ignore_term) ::signal(SIGTERM, SIG_IGN);  // inherited by the children
  auto h = acquire(o);
  if (!h) return fail(h.error(), o);
  std::vector<pid_t> children;
  for (unsigned i = 0; i < std::max(o.count, 1U); ++i) {
    pid_t child = ::fork();
    if (child < 0) return fail(gpureap::sys::errno_error(errno, "fork"), o);
    if (child == 0) pause_forever();  // inherits every descriptor of the context
    children.push_back(child);
  }
  emit("{\"mode\":\"fork-after-init\",\"pid\":" + std::to_string(::getpid()) + ",\"child\":" +
       std::to_string(children.front()) + ",\"children\":" + pid_list(children) + ",\"gpu\":" + quote(o.gpu) +
       ",\"device\":" + std::to_string(o.device) + ",\"bytes\":" + std::to_string(o.bytes) + h->describe() +
       ",\"sigterm\":" + quote(o.ignore_term ? "ignore" : "default") + "}");
  pause_forever();
}

// Forks and execs one copy of the child argv. A close-on-exec pipe tells
// whether exec worked: EOF = it did, else the child wrote errno.
Result<pid_t> spawn_child(const Options& o) {
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return gpureap::sys::errno_error(errno, "pipe2");
  pid_t child = ::fork();
  if (child < 0) return gpureap::sys::errno_error(errno, "fork");
  if (child == 0) {
    ::close(p[0]);
    std::vector<char*> args;
    for (const auto& a : o.child_argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    int err = errno;
    [[maybe_unused]] ssize_t n = ::write(p[1], &err, sizeof err);
    ::_exit(127);
  }
  ::close(p[1]);
  int err = 0;
  ssize_t n = 0;
  do n = ::read(p[0], &err, sizeof err); while (n < 0 && errno == EINTR);
  ::close(p[0]);
  if (n > 0) {
    ::waitpid(child, nullptr, 0);
    return Error{err, "exec " + o.child_argv[0] + ": " + std::strerror(err)};
  }
  return child;
}

int mode_parent(const Options& o) {
  if (o.child_argv.empty()) return kExitUsage;
  std::vector<pid_t> children;
  for (unsigned i = 0; i < std::max(o.count, 1U); ++i) {
    auto c = spawn_child(o);
    if (!c) {
      log(c.error().message);
      return 127;
    }
    children.push_back(*c);
  }
  const bool waits = !o.exit_after_spawn && !o.exit_after_s;
  emit("{\"mode\":\"parent\",\"pid\":" + std::to_string(::getpid()) + ",\"child\":" +
       std::to_string(children.front()) + ",\"children\":" + pid_list(children) +
       ",\"exit_after_spawn\":" + (o.exit_after_spawn ? "true" : "false") + ",\"waits\":" +
       (waits ? "true" : "false") + "}");
  if (o.exit_after_spawn) return 0;
  if (o.exit_after_s) {
    // The plan's parent.py: sleep, then exit without wait(): the children are orphaned.
    const auto ns = static_cast<long long>(*o.exit_after_s * 1e9);
    timespec left{static_cast<time_t>(ns / 1000000000LL), static_cast<long>(ns % 1000000000LL)};
    while (::nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
    log("exiting without wait()");
    return 0;
  }
  int status = 0;
  for (pid_t c : children) {
    while (::waitpid(c, &status, 0) < 0 && errno == EINTR) {
    }
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 128 + WTERMSIG(status);
}

int mode_zombie_maker(const Options& o) {
  // SIG_IGN on SIGCHLD (maybe inherited) would make the kernel reap them for us.
  ::signal(SIGCHLD, SIG_DFL);
  std::vector<pid_t> kids;
  for (unsigned i = 0; i < o.count; ++i) {
    pid_t c = ::fork();
    if (c < 0) return fail(gpureap::sys::errno_error(errno, "fork"), o);
    if (c == 0) ::_exit(0);
    kids.push_back(c);
  }
  // WNOWAIT: wait until each child has exited (is a zombie) without reaping it,
  // so the ready line is true when printed.
  for (pid_t c : kids) {
    siginfo_t info{};
    while (::waitid(P_PID, static_cast<id_t>(c), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
    }
  }
  emit("{\"mode\":\"zombie-maker\",\"pid\":" + std::to_string(::getpid()) + ",\"zombies\":" + pid_list(kids) + "}");
  pause_forever();
}

int mode_spawn_tree(const Options& o) {
  // Each child writes one byte once it is set up (after setsid), so the ready
  // line is true when printed.
  int p[2];
  if (::pipe2(p, O_CLOEXEC) != 0) return fail(gpureap::sys::errno_error(errno, "pipe2"), o);
  std::vector<pid_t> kids;
  for (unsigned i = 0; i < o.count; ++i) {
    pid_t c = ::fork();
    if (c < 0) return fail(gpureap::sys::errno_error(errno, "fork"), o);
    if (c == 0) {
      ::close(p[0]);
      if (o.setsid && ::setsid() < 0) ::_exit(kExitError);
      char ok = 1;
      [[maybe_unused]] ssize_t n = ::write(p[1], &ok, 1);
      ::close(p[1]);
      pause_forever();
    }
    kids.push_back(c);
  }
  ::close(p[1]);
  for (unsigned got = 0; got < o.count;) {
    char buf[64];
    ssize_t n = ::read(p[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return fail(Error{0, "a spawn-tree child died before it was ready"}, o);
    got += static_cast<unsigned>(n);
  }
  ::close(p[0]);
  emit("{\"mode\":\"spawn-tree\",\"pid\":" + std::to_string(::getpid()) + ",\"children\":" + pid_list(kids) +
       ",\"setsid\":" + (o.setsid ? "true" : "false") + "}");
  pause_forever();
}

int mode_init_sim(const Options& o) {
  const std::string dir = sim_dir(o);
  if (auto st = sim::init_sim_dir(dir, sim::default_config(o.sim_devices)); !st) return fail(st.error(), o);
  emit("{\"mode\":\"init-sim\",\"sim_dir\":" + quote(dir) + "}");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (std::string_view(argv[1]) == "--help" || std::string_view(argv[1]) == "-h" ||
                    std::string_view(argv[1]) == "help")) {
    std::fputs(kHelp, stdout);
    return 0;
  }
  auto opts = parse_args(argc, argv);
  if (!opts) {
    log(opts.error().message);
    std::fputs(kHelp, stderr);
    return kExitUsage;
  }
  const Options& o = *opts;
  if (o.mode == "hold") return mode_hold(o);
  if (o.mode == "fork-after-init") return mode_fork_after_init(o);
  if (o.mode == "parent") {
    if (o.child_argv.empty()) {
      log("parent: missing -- CHILD ARGV");
      return kExitUsage;
    }
    return mode_parent(o);
  }
  if (o.mode == "zombie-maker") return mode_zombie_maker(o);
  if (o.mode == "spawn-tree") return mode_spawn_tree(o);
  if (o.mode == "init-sim") return mode_init_sim(o);
  log("unknown mode '" + o.mode + "'");
  std::fputs(kHelp, stderr);
  return kExitUsage;
}
