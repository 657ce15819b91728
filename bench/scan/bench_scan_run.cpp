// bench_scan_run: who holds the GPU device files? gpureap's scan against fuser
// and lsof, on the same synthetic node, in the same run.
//
// It spawns --procs children (default 2000) that each hold --fds descriptors
// (default 25): a few on three "device" files in a temp dir (dev/nvidia0,
// dev/nvidiactl, dev/nvidia-uvm: what the simulated GPU uses), the rest
// /dev/null, a pipe, and regular files. Then, --repeat times, it runs
//   fuser -v DEVS, lsof -w DEVS, bench_scan --threads 1 DEVS, bench_scan --threads N DEVS
// (and, with --bpf-pin-dir DIR on a bpffs, the scan on one and N threads and
// trace again, taking the programs a first, untimed run of each pinned there)
// each as a child process, timing wall clock and taking max RSS from wait4, and
// prints medians and ratios. It kills exactly the children it made, at the end
// and on any error (they also carry PR_SET_PDEATHSIG in case this process dies).
#include "gpu/sim_client.hpp"
#include <fcntl.h>
#include <linux/close_range.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

struct Config {
  unsigned procs = 2000;
  unsigned fds = 25;
  unsigned repeat = 3;
  unsigned threads = 0;  // 0: hardware_concurrency
  std::string bench_scan;
  std::string gpureap;  // the whole `gpureap trace`, on the simulated GPU whose dev files these are
  std::string pin_dir;  // --bpf-pin-dir DIR: three more rows, their programs pinned there (a bpffs)
  std::string extra;  // --extra CMD: run `sh -c CMD` once before timing (e.g. perf), $DEVS set
};

// The children this run made; the destructor kills and reaps exactly them.
class Fleet {
 public:
  Fleet() = default;
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;
  ~Fleet() { kill_all(); }
  void add(pid_t pid) { pids_.push_back(pid); }
  [[nodiscard]] std::size_t size() const { return pids_.size(); }
  void kill_all() {
    for (pid_t pid : pids_) ::kill(pid, SIGKILL);
    for (pid_t pid : pids_) {
      while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
      }
    }
    pids_.clear();
  }

 private:
  std::vector<pid_t> pids_;
};

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gpureap-bench-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::exit(2);
    }
    path = fs::canonical(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// Child body, async-signal-safe calls only. Opens its descriptors, reports
// ready, blocks until the harness goes away or kills it.
[[noreturn]] void child_main(int ready_fd, int hold_fd, const std::vector<std::string>& devs,
                             const std::vector<std::string>& files, unsigned total_fds) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  // Keep only the two pipe ends (moved up high), so the count is exactly ours.
  ::dup2(ready_fd, 1000);
  ::dup2(hold_fd, 1001);
  ::syscall(SYS_close_range, 0u, 999u, 0u);
  ::syscall(SYS_close_range, 1002u, ~0u, 0u);
  unsigned have = 2;
  for (int i = 0; i < 3; ++i) have += ::open("/dev/null", O_RDWR) >= 0 ? 1u : 0u;  // stdio
  // A few device descriptors, as a CUDA process has: nvidiactl, nvidia-uvm, nvidia0 twice.
  const int dev_order[] = {1, 2, 0, 0};
  for (int d : dev_order) have += ::open(devs[static_cast<std::size_t>(d)].c_str(), O_RDWR) >= 0 ? 1u : 0u;
  int p[2];
  if (::pipe(p) == 0) have += 2;
  for (std::size_t i = 0; have < total_fds; ++i) {
    if (::open(files[i % files.size()].c_str(), O_RDONLY) < 0) break;
    ++have;
  }
  char c = 'r';
  (void)!::write(1000, &c, 1);
  (void)!::read(1001, &c, 1);
  ::_exit(0);
}

struct Sample {
  double ms = 0;
  double cpu_ms = 0;  // user + system of that child: steadier than wall time on a shared machine
  long rss_kb = 0;
  int status = 0;
  std::string out;
};

// fork+exec `argv`, stdout captured (first 4 KiB), stderr to /dev/null; wall
// time and this child's own max RSS from wait4.
Sample run_tool(const std::vector<std::string>& argv) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    return Sample{0, 0, 0, -1, {}};  // reported as a failed tool; main returns, Fleet cleans up
  }
  auto t0 = std::chrono::steady_clock::now();
  pid_t pid = ::fork();
  if (pid == 0) {
    int devnull = ::open("/dev/null", O_RDWR);
    ::dup2(devnull, 0);
    ::dup2(out[1], 1);
    ::dup2(devnull, 2);
    std::vector<char*> args;
    args.reserve(argv.size() + 1);
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  ::close(out[1]);
  if (pid < 0) {  // never wait4(-1): that would reap one of the fleet
    std::perror("fork");
    ::close(out[0]);
    return Sample{0, 0, 0, -1, {}};
  }
  Sample s;
  char buf[4096];
  ssize_t n = 0;
  while ((n = ::read(out[0], buf, sizeof buf)) > 0) {
    if (s.out.size() < 4096) s.out.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  rusage ru{};
  while (::wait4(pid, &s.status, 0, &ru) < 0 && errno == EINTR) {
  }
  auto t1 = std::chrono::steady_clock::now();
  s.ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
  s.rss_kb = ru.ru_maxrss;
  auto tv_ms = [](const timeval& tv) { return static_cast<double>(tv.tv_sec) * 1e3 + static_cast<double>(tv.tv_usec) / 1e3; };
  s.cpu_ms = tv_ms(ru.ru_utime) + tv_ms(ru.ru_stime);
  return s;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

Config parse_args(int argc, char** argv) {
  Config c;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        (void)std::fprintf(stderr, "missing value for %s\n", argv[i]);
        std::exit(2);
      }
      return argv[++i];
    };
    if (a == "--procs") {
      c.procs = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    } else if (a == "--fds") {
      c.fds = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    } else if (a == "--repeat") {
      c.repeat = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    } else if (a == "--threads") {
      c.threads = static_cast<unsigned>(std::strtoul(next(), nullptr, 10));
    } else if (a == "--bench-scan") {
      c.bench_scan = next();
    } else if (a == "--gpureap") {
      c.gpureap = next();
    } else if (a == "--extra") {
      c.extra = next();
    } else if (a == "--bpf-pin-dir") {
      c.pin_dir = next();
    } else {
      (void)std::fprintf(stderr,
                   "usage: bench_scan_run [--procs N] [--fds N] [--repeat N] [--threads N] [--bench-scan PATH] [--gpureap PATH] [--bpf-pin-dir DIR] [--extra CMD]\n");
      std::exit(2);
    }
  }
  if (c.bench_scan.empty()) {
    c.bench_scan = (fs::read_symlink("/proc/self/exe").parent_path() / "bench_scan").string();
  }
  if (c.gpureap.empty()) {
    c.gpureap = (fs::read_symlink("/proc/self/exe").parent_path() / "../../src/cli/gpureap").string();
  }
  if (c.threads == 0) c.threads = std::max(2u, std::thread::hardware_concurrency());
  if (c.fds < 12) c.fds = 12;
  return c;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg = parse_args(argc, argv);
  TempDir dir;
  fs::create_directories(dir.path / "dev");
  std::vector<std::string> devs;
  for (const char* name : {"nvidia0", "nvidiactl", "nvidia-uvm"}) {
    devs.push_back((dir.path / "dev" / name).string());
    std::ofstream(devs.back()).put('\0');
  }
  // The temp dir is also a simulated GPU: `gpureap trace --gpu sim` then counts
  // holders of these same files. It has no contexts, so the sim "driver" does
  // no fd walk of its own: the trace rows time trace's own work.
  if (auto st = gpureap::gpu::sim::init_sim_dir(dir.path.string(), gpureap::gpu::sim::default_config(1)); !st) {
    (void)std::fprintf(stderr, "init sim dir: %s\n", st.error().message.c_str());
    return 2;
  }
  ::setenv("GPUREAP_SIM_DIR", dir.path.c_str(), 1);
  std::vector<std::string> files;
  for (int i = 0; i < 8; ++i) {
    files.push_back((dir.path / ("data-" + std::to_string(i))).string());
    std::ofstream(files.back()) << "x";
  }

  Fleet fleet;
  int ready[2];
  int hold[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(hold, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    return 2;
  }
  auto s0 = std::chrono::steady_clock::now();
  for (unsigned i = 0; i < cfg.procs; ++i) {
    pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      return 2;  // Fleet's destructor kills the ones already made
    }
    if (pid == 0) child_main(ready[1], hold[0], devs, files, cfg.fds);
    fleet.add(pid);
  }
  ::close(ready[1]);
  ::close(hold[0]);
  for (unsigned got = 0; got < cfg.procs;) {
    char buf[512];
    ssize_t n = ::read(ready[0], buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      (void)std::fprintf(stderr, "children died before ready (%u/%u)\n", got, cfg.procs);
      return 2;
    }
    got += static_cast<unsigned>(n);
  }
  auto s1 = std::chrono::steady_clock::now();
  std::printf("spawned %u processes x %u fds (4 on 3 device files) in %.0f ms; %u repeats\n", cfg.procs, cfg.fds,
              std::chrono::duration<double, std::milli>(s1 - s0).count(), cfg.repeat);

  if (!cfg.extra.empty()) {
    std::string list = devs[0] + " " + devs[1] + " " + devs[2];
    ::setenv("DEVS", list.c_str(), 1);
    ::setenv("BENCH_SCAN", cfg.bench_scan.c_str(), 1);
    (void)std::fflush(stdout);
    pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cfg.extra.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    while (pid > 0 && ::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }

  struct Tool {
    std::string label;
    std::vector<std::string> argv;
    std::vector<double> ms;
    std::vector<double> cpu;
    std::vector<double> rss;
    std::string last_out;
    int last_status = 0;
  };
  std::vector<Tool> tools;
  tools.push_back({"fuser -v", {"fuser", "-v", devs[0], devs[1], devs[2]}, {}, {}, {}, {}, 0});
  tools.push_back({"lsof", {"lsof", "-w", devs[0], devs[1], devs[2]}, {}, {}, {}, {}, 0});
  auto tool = [](std::string label, std::vector<std::string> command) {
    return Tool{std::move(label), std::move(command), {}, {}, {}, {}, 0};
  };
  const std::string n = std::to_string(cfg.threads);
  tools.push_back(tool("scan procfs 1 thread", {cfg.bench_scan, "--fd-source", "procfs", "--threads", "1", devs[0], devs[1], devs[2]}));
  tools.push_back(tool("scan bpf 1 thread", {cfg.bench_scan, "--fd-source", "bpf", "--threads", "1", devs[0], devs[1], devs[2]}));
  tools.push_back(tool("scan bpf " + n + " threads", {cfg.bench_scan, "--fd-source", "bpf",
                                                      "--threads", n, devs[0], devs[1], devs[2]}));
  tools.push_back(tool("trace procfs 1 thr", {cfg.gpureap, "trace", "--gpu", "sim", "--json", "--fd-source", "procfs", "--threads", "1"}));
  tools.push_back(tool("trace 1 thread", {cfg.gpureap, "trace", "--gpu", "sim", "--json", "--fd-source", "bpf", "--threads", "1"}));
  tools.push_back(tool("trace " + n + " threads", {cfg.gpureap, "trace", "--gpu", "sim", "--json", "--fd-source", "bpf", "--threads", n}));
  tools.push_back(tool("trace table 1 thr", {cfg.gpureap, "trace", "--gpu", "sim", "--fd-source", "bpf", "--threads", "1"}));
  if (!cfg.pin_dir.empty()) {
    // Programs an earlier run pinned: one untimed run of each pins them.
    tools.push_back(tool("scan bpf 1 thr pin", {cfg.bench_scan, "--fd-source", "bpf", "--threads", "1", "--bpf-pin-dir",
                                                cfg.pin_dir, devs[0], devs[1], devs[2]}));
    tools.push_back(tool("trace 1 thr pin", {cfg.gpureap, "trace", "--gpu", "sim", "--json", "--fd-source", "bpf",
                                             "--threads", "1", "--bpf-pin-dir", cfg.pin_dir}));
    tools.push_back(tool("scan bpf " + n + " thr pin", {cfg.bench_scan, "--fd-source", "bpf", "--threads", n,
                                                        "--bpf-pin-dir", cfg.pin_dir, devs[0], devs[1], devs[2]}));
    for (auto it = tools.end() - 3; it != tools.end(); ++it) (void)run_tool(it->argv);
  }
  // Interleaved, so drift in machine load hits every tool alike.
  for (unsigned r = 0; r < cfg.repeat; ++r) {
    for (auto& t : tools) {
      Sample s = run_tool(t.argv);
      t.ms.push_back(s.ms);
      t.cpu.push_back(s.cpu_ms);
      t.rss.push_back(static_cast<double>(s.rss_kb));
      t.last_out = s.out;
      t.last_status = s.status;
    }
  }
  for (const auto& t : tools) {
    if (!WIFEXITED(t.last_status) || (WEXITSTATUS(t.last_status) != 0 && t.label.rfind("scan", 0) == 0)) {
      (void)std::fprintf(stderr, "%s failed (status %d)\n", t.label.c_str(), t.last_status);
      return 2;
    }
  }
  // Sanity: lsof lists one line per (process, descriptor) plus a header.
  std::size_t lsof_lines = static_cast<std::size_t>(std::count(tools[1].last_out.begin(), tools[1].last_out.end(), '\n'));
  std::printf("scan (procfs) says: %s", tools[2].last_out.c_str());
  std::printf("scan (bpf) says:    %s", tools[3].last_out.c_str());
  if (lsof_lines <= 1) std::printf("note: lsof printed no holders (lines=%zu)\n", lsof_lines);

  const double fuser_ms = median(tools[0].ms);
  const double lsof_ms = median(tools[1].ms);
  const double fuser_cpu = median(tools[0].cpu);
  const double lsof_cpu = median(tools[1].cpu);
  std::printf("\n%-20s %9s %8s %8s %9s %9s %9s %9s %9s %9s\n", "tool", "wall ms", "min ms", "cpu ms", "max RSS",
              "wall/fuser", "wall/lsof", "cpu/fuser", "cpu/lsof", "fuser/wall");
  for (const auto& t : tools) {
    double m = median(t.ms);
    double c = median(t.cpu);
    std::printf("%-20s %9.1f %8.1f %8.1f %5.1f MiB %9.2fx %8.2fx %8.2fx %8.2fx %8.2fx\n", t.label.c_str(), m,
                *std::min_element(t.ms.begin(), t.ms.end()), c, median(t.rss) / 1024.0, m / fuser_ms, m / lsof_ms,
                c / fuser_cpu, c / lsof_cpu, fuser_ms / m);
  }
  std::printf("(medians of %u interleaved runs; min ms is the best run; cpu = user+sys of that process)\n",
              cfg.repeat);
  double per_fd_us = median(tools[2].ms) * 1000.0 / (static_cast<double>(cfg.procs) * cfg.fds);
  std::printf("\nscan procfs 1 thread: %.2f us per descriptor over %u descriptors (whole node, wall clock incl. exec)\n",
              per_fd_us, cfg.procs * cfg.fds);
  fleet.kill_all();
  return 0;
}
