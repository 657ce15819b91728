// Benchmark: gpureap-init against tini, tini-static, dumb-init and catatonit.
// Each init runs as PID 1 of a fresh PID + mount namespace with its own /proc
// (as in a container) and supervises the same workload:
//   latency  - SIGTERM to the init -> the init has exited (child dies of TERM);
//   reaping  - a grandchild leaves N zombies, re-parented to the init at once:
//              time until the init has reaped them all (zombies per second);
//   size     - file size of the binary;  RSS - VmRSS of the idle init.
// Trials are interleaved across inits; medians are printed, with ratios
// against tini-static (the static peer). Needs root (namespaces).
#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "bench_init: %s: %s\n", what, std::strerror(errno));
  std::exit(2);
}

// ---- workloads (run under each init: this binary re-executed with --worker) ----

void say(const std::string& line) {
  std::string text = line + "\n";
  if (::write(STDOUT_FILENO, text.data(), text.size()) < 0) ::_exit(3);
}

int worker_pause() {
  say("ready");
  for (;;) ::pause();
}

// A grandchild makes `count` children, waits (without reaping) until each is a
// zombie, hands their pids to us and exits: the zombies go to the init at once.
int worker_zombies(int count) {
  say("begin");
  int fds[2];
  if (::pipe(fds) != 0) die("pipe");
  pid_t g = ::fork();
  if (g < 0) die("fork");
  if (g == 0) {
    ::close(fds[0]);
    std::vector<pid_t> kids;
    for (int i = 0; i < count; ++i) {
      pid_t c = ::vfork();  // no page-table copy: fork costs ms on some VMs, and the child only exits
      if (c < 0) die("vfork");
      if (c == 0) ::_exit(0);
      kids.push_back(c);
    }
    for (pid_t c : kids) {
      siginfo_t info{};
      while (::waitid(P_PID, static_cast<id_t>(c), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
      }
    }
    const char* p = reinterpret_cast<const char*>(kids.data());
    size_t left = kids.size() * sizeof(pid_t);
    while (left > 0) {
      ssize_t n = ::write(fds[1], p, left);
      if (n <= 0) ::_exit(4);
      p += n;
      left -= static_cast<size_t>(n);
    }
    ::_exit(0);
  }
  ::close(fds[1]);
  std::vector<pid_t> kids(static_cast<size_t>(count));
  char* p = reinterpret_cast<char*>(kids.data());
  size_t left = kids.size() * sizeof(pid_t);
  while (left > 0) {
    ssize_t n = ::read(fds[0], p, left);
    if (n <= 0) die("read pids");
    p += n;
    left -= static_cast<size_t>(n);
  }
  int64_t t0 = now_ns();  // the grandchild exits now; its zombies move to the init
  int status = 0;
  if (::waitpid(g, &status, 0) != g) die("waitpid");
  // A zombie still answers kill(0); poll gently so we do not take the CPU from the init.
  const timespec nap{0, 100'000};
  for (pid_t c : kids) {
    while (::kill(c, 0) == 0) ::nanosleep(&nap, nullptr);
  }
  say("reap_ns " + std::to_string(now_ns() - t0));
  for (;;) ::pause();  // until the bench has read the init's CPU time and sends SIGTERM
}

// ---- harness ----

struct Init {
  std::string name;
  std::string path;
  std::vector<int64_t> latency_ns, reap_ns, reap_cpu_ns, rss_kib;
  int64_t size = 0;
};

struct Child {
  pid_t pid = -1;
  int pidfd = -1;
  int out = -1;
  ~Child() {
    if (pid > 0) {
      ::syscall(SYS_pidfd_send_signal, pidfd, SIGKILL, nullptr, 0U);
      ::waitpid(pid, nullptr, 0);
    }
    if (pidfd >= 0) ::close(pidfd);
    if (out >= 0) ::close(out);
  }
  int wait() {
    int status = 0;
    if (::waitpid(pid, &status, 0) != pid) die("waitpid init");
    pid = -1;
    return status;
  }
};

bool start(Child& c, const std::vector<std::string>& args) {
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return false;
  clone_args ca{};
  ca.flags = CLONE_PIDFD | CLONE_NEWPID | CLONE_NEWNS;
  ca.pidfd = reinterpret_cast<uint64_t>(&c.pidfd);
  ca.exit_signal = SIGCHLD;
  long pid = ::syscall(SYS_clone3, &ca, sizeof ca);
  if (pid == 0) {
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(120);
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) ::_exit(121);
    if (::dup2(fds[1], STDOUT_FILENO) < 0) ::_exit(122);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(fds[1]);
  if (pid < 0) {
    ::close(fds[0]);
    return false;
  }
  c.pid = static_cast<pid_t>(pid);
  c.out = fds[0];
  return true;
}

std::string read_line(int fd) {
  std::string line;
  char ch = 0;
  while (::read(fd, &ch, 1) == 1 && ch != '\n') line.push_back(ch);
  return line;
}

// CPU time the process has run, in ns (first field of /proc/<pid>/schedstat).
int64_t cpu_ns(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/schedstat";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  long long ns = -1;
  if (std::fscanf(f, "%lld", &ns) != 1) ns = -1;
  std::fclose(f);
  return ns;
}

int64_t rss_kib(pid_t pid) {
  std::string path = "/proc/" + std::to_string(pid) + "/status";
  FILE* f = std::fopen(path.c_str(), "r");
  if (f == nullptr) return -1;
  char line[256];
  int64_t kib = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmRSS:", 6) == 0) kib = std::atoll(line + 6);
  }
  std::fclose(f);
  return kib;
}

std::vector<std::string> command(const Init& init, const std::string& self, std::vector<std::string> worker) {
  std::vector<std::string> argv{init.path, "--", self, "--worker"};
  argv.insert(argv.end(), worker.begin(), worker.end());
  return argv;
}

void trial_latency(Init& init, const std::string& self) {
  Child c;
  if (!start(c, command(init, self, {"pause"}))) die("clone3");
  if (read_line(c.out) != "ready") die("worker not ready");
  init.rss_kib.push_back(rss_kib(c.pid));
  int64_t t0 = now_ns();
  if (::syscall(SYS_pidfd_send_signal, c.pidfd, SIGTERM, nullptr, 0U) != 0) die("pidfd_send_signal");
  pollfd p{c.pidfd, POLLIN, 0};
  if (::poll(&p, 1, 10000) != 1) die("init did not exit on SIGTERM");
  init.latency_ns.push_back(now_ns() - t0);
  c.wait();
}

void trial_reap(Init& init, const std::string& self, int zombies) {
  Child c;
  if (!start(c, command(init, self, {"zombies", std::to_string(zombies)}))) die("clone3");
  if (read_line(c.out) != "begin") die("worker did not begin");
  int64_t cpu0 = cpu_ns(c.pid);
  std::string line = read_line(c.out);
  if (line.rfind("reap_ns ", 0) != 0) die("no reap time");
  init.reap_cpu_ns.push_back(cpu_ns(c.pid) - cpu0);  // the init's own CPU for reaping them all
  init.reap_ns.push_back(std::atoll(line.c_str() + 8));
  if (::syscall(SYS_pidfd_send_signal, c.pidfd, SIGTERM, nullptr, 0U) != 0) die("pidfd_send_signal");
  c.wait();
}

double median(std::vector<int64_t> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 == 1 ? static_cast<double>(v[n / 2]) : (static_cast<double>(v[n / 2 - 1]) + static_cast<double>(v[n / 2])) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 3 && std::strcmp(argv[1], "--worker") == 0) {
    if (std::strcmp(argv[2], "pause") == 0) return worker_pause();
    if (std::strcmp(argv[2], "zombies") == 0 && argc == 4) return worker_zombies(std::atoi(argv[3]));
    return 2;
  }
  int trials = 40, reap_trials = 7, zombies = 10000;
  std::string gpureap = GPUREAP_INIT_BIN;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--trials") == 0) trials = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--reap-trials") == 0) reap_trials = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--zombies") == 0) zombies = std::atoi(argv[i + 1]);
    else if (std::strcmp(argv[i], "--gpureap-init") == 0) gpureap = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: %s [--trials N] [--reap-trials N] [--zombies N] [--gpureap-init PATH]\n", argv[0]);
      return 2;
    }
  }
  char self_buf[4096];
  ssize_t n = ::readlink("/proc/self/exe", self_buf, sizeof self_buf - 1);
  if (n <= 0) die("readlink /proc/self/exe");
  std::string self(self_buf, static_cast<size_t>(n));

  std::vector<Init> inits;
  for (auto [name, path] : std::vector<std::pair<std::string, std::string>>{
           {"tini-static", "/usr/bin/tini-static"}, {"tini", "/usr/bin/tini"}, {"dumb-init", "/usr/bin/dumb-init"},
           {"catatonit", "/usr/bin/catatonit"}, {"gpureap-init", gpureap}}) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) {
      std::fprintf(stderr, "skipping %s: %s not found\n", name.c_str(), path.c_str());
      continue;
    }
    inits.push_back(Init{name, path, {}, {}, {}, {}, static_cast<int64_t>(st.st_size)});
  }
  for (int t = 0; t < trials; ++t) {
    for (Init& init : inits) trial_latency(init, self);
  }
  for (int t = 0; t < reap_trials; ++t) {
    for (Init& init : inits) trial_reap(init, self, zombies);
  }

  const Init& ref = inits.front();
  double ref_lat = median(ref.latency_ns), ref_reap = median(ref.reap_ns), ref_rss = median(ref.rss_kib);
  double ref_cpu = median(ref.reap_cpu_ns) / zombies;
  std::printf("gpureap-init benchmark: %d latency trials, %d reaping trials of %d zombies; ratios vs %s\n", trials,
              reap_trials, zombies, ref.name.c_str());
  std::printf("(size, RSS, latency, CPU per zombie: lower is better; zombies/s: higher is better.\n"
              " zombies/s is wall time and swings with machine load; init CPU ns per zombie is the init's own\n"
              " CPU time (schedstat) while reaping, the stable measure of its reaping cost)\n\n");
  std::printf("%-13s %10s %6s %8s %6s %15s %6s %12s %6s %14s %6s\n", "init", "size KiB", "x", "RSS KiB", "x",
              "TERM->exit ms", "x", "zombies/s", "x", "CPU ns/zombie", "x");
  for (const Init& init : inits) {
    double lat = median(init.latency_ns), reap = median(init.reap_ns), rss = median(init.rss_kib);
    double cpu = median(init.reap_cpu_ns) / zombies;
    double zps = reap > 0 ? zombies / (reap / 1e9) : 0;
    double ref_zps = ref_reap > 0 ? zombies / (ref_reap / 1e9) : 0;
    std::printf("%-13s %10.1f %6.2f %8.0f %6.2f %15.3f %6.2f %12.0f %6.2f %14.0f %6.2f\n", init.name.c_str(),
                static_cast<double>(init.size) / 1024, static_cast<double>(init.size) / static_cast<double>(ref.size),
                rss, ref_rss > 0 ? rss / ref_rss : 0, lat / 1e6, ref_lat > 0 ? lat / ref_lat : 0, zps,
                ref_zps > 0 ? zps / ref_zps : 0, cpu, ref_cpu > 0 ? cpu / ref_cpu : 0);
  }
  return 0;
}
