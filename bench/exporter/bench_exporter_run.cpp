// bench_exporter_run: gpureap exporter on a node of --procs GPU processes
// (default 2000) on the simulated GPU (8 H200s): its RSS, the latency of a
// scrape (p50, p99 of --scrapes sequential GETs of /metrics on loopback) and
// one scan's CPU time, against the footprint dcgm-exporter documents.
//
// Each process is a forked child that creates a context on the simulated
// device (its ctx file, the device descriptors and mappings a CUDA process
// has: the sim driver lists it, with memory and an SM utilization), says it is
// ready on a pipe and blocks. The exporter is the real binary, started with
// GPUREAP_SIM_DIR pointing at this run's device. Every child this run made is
// killed and reaped at the end and on any error (they also carry
// PR_SET_PDEATHSIG in case this process dies).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
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
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "gpu/sim_client.hpp"

namespace {

namespace fs = std::filesystem;
namespace sim = gpureap::gpu::sim;
using Clock = std::chrono::steady_clock;

struct Config {
  unsigned procs = 2000;
  unsigned devices = 8;
  unsigned scrapes = 200;
  double interval_s = 5;
  unsigned cpu_scans = 3;  // scans the CPU time is averaged over
  unsigned series = 0;     // --max-process-series; 0: as many as processes (the worst case)
  std::string gpureap;
};

// The processes this run made; the destructor kills and reaps exactly them.
class Fleet {
 public:
  Fleet() = default;
  Fleet(const Fleet&) = delete;
  Fleet& operator=(const Fleet&) = delete;
  ~Fleet() { kill_all(); }
  void add(pid_t pid) { pids_.push_back(pid); }
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
    std::string tmpl = (fs::temp_directory_path() / "gpureap-bench-exporter-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      std::perror("mkdtemp");
      std::exit(2);
    }
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

// A GPU process: a context on `device`, ready said on `ready_fd`, then blocked
// until the harness goes away or kills it.
[[noreturn]] void child_main(const std::string& dir, unsigned device, unsigned index, int ready_fd, int hold_fd) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  auto ctx = sim::create_context(dir, device, (64 + index % 8 * 32) * sim::kMiB, index % 4 == 0 ? 0 : 60);
  const char c = ctx ? 'r' : 'e';
  (void)!::write(ready_fd, &c, 1);
  char got = 0;
  (void)!::read(hold_fd, &got, 1);
  ::_exit(0);
}

// One HTTP/1.0 GET on loopback: the body, or nullopt.
std::optional<std::string> http_get(int port, const std::string& path) {
  const int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (s < 0) return std::nullopt;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<std::uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string got;
  if (::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
    const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (::write(s, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[65536];
      for (;;) {
        pollfd p{s, POLLIN, 0};
        if (::poll(&p, 1, 10000) <= 0) break;
        const ssize_t n = ::read(s, buf, sizeof buf);
        if (n <= 0) break;
        got.append(buf, static_cast<std::size_t>(n));
      }
    }
  }
  ::close(s);
  const auto body = got.find("\r\n\r\n");
  if (got.rfind("HTTP/1.1 200", 0) != 0 && got.rfind("HTTP/1.0 200", 0) != 0) return std::nullopt;
  if (body == std::string::npos) return std::nullopt;
  return got.substr(body + 4);
}

std::optional<double> sample(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0) return std::stod(line.substr(name.size() + 1));
  }
  return std::nullopt;
}

long status_kib(pid_t pid, const char* key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) == 0) return std::stol(line.substr(std::strlen(key)));
  }
  return -1;
}

// utime + stime of `pid`, in seconds.
double cpu_seconds(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return -1;
  std::istringstream fields(stat.substr(close + 2));
  std::string f;
  unsigned long long utime = 0, stime = 0;
  for (int i = 3; fields >> f; ++i) {
    if (i == 14) utime = std::stoull(f);
    if (i == 15) {
      stime = std::stoull(f);
      break;
    }
  }
  return static_cast<double>(utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

double percentile(std::vector<double> v, double p) {
  std::sort(v.begin(), v.end());
  const auto i = static_cast<std::size_t>(p * static_cast<double>(v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

int usage() {
  std::fprintf(stderr,
               "usage: bench_exporter_run --gpureap PATH [--procs N] [--devices N] [--scrapes N] [--interval S] "
               "[--cpu-scans N] [--max-process-series N]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (i + 1 >= argc) return usage();
    const std::string v = argv[++i];
    if (a == "--gpureap") cfg.gpureap = v;
    else if (a == "--procs") cfg.procs = static_cast<unsigned>(std::stoul(v));
    else if (a == "--devices") cfg.devices = static_cast<unsigned>(std::stoul(v));
    else if (a == "--scrapes") cfg.scrapes = static_cast<unsigned>(std::stoul(v));
    else if (a == "--interval") cfg.interval_s = std::stod(v);
    else if (a == "--max-process-series") cfg.series = static_cast<unsigned>(std::stoul(v));
    else if (a == "--cpu-scans") cfg.cpu_scans = static_cast<unsigned>(std::stoul(v));
    else return usage();
  }
  if (cfg.gpureap.empty() || cfg.scrapes == 0 || cfg.devices == 0) return usage();

  TempDir dir;
  if (auto st = sim::init_sim_dir(dir.path.string(), sim::default_config(cfg.devices)); !st) {
    std::fprintf(stderr, "init sim dir: %s\n", st.error().message.c_str());
    return 1;
  }
  Fleet fleet;
  int ready[2], hold[2];
  if (::pipe2(ready, O_CLOEXEC) != 0 || ::pipe2(hold, O_CLOEXEC) != 0) {
    std::perror("pipe2");
    return 1;
  }
  for (unsigned i = 0; i < cfg.procs; ++i) {
    const pid_t pid = ::fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) child_main(dir.path.string(), i % cfg.devices, i, ready[1], hold[0]);
    fleet.add(pid);
  }
  unsigned failed = 0;
  for (unsigned i = 0; i < cfg.procs; ++i) {
    char c = 0;
    if (::read(ready[0], &c, 1) != 1) {
      std::fprintf(stderr, "a GPU process died before it was ready\n");
      return 1;
    }
    failed += c == 'r' ? 0 : 1;
  }
  if (failed > 0) {
    std::fprintf(stderr, "%u of %u processes could not create a context\n", failed, cfg.procs);
    return 1;
  }

  // The exporter: its stdout's first line names the port.
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return 1;
  char interval[32];
  std::snprintf(interval, sizeof interval, "%g", cfg.interval_s);
  const pid_t exporter = ::fork();
  if (exporter == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(out[1], 1);
    ::setenv("GPUREAP_SIM_DIR", dir.path.c_str(), 1);
    std::vector<std::string> args{cfg.gpureap, "exporter", "--listen", "127.0.0.1:0", "--gpu", "sim", "--interval",
                                  interval, "--max-process-series", std::to_string(cfg.series == 0 ? cfg.procs : cfg.series)};
    std::vector<char*> argp;
    for (auto& s : args) argp.push_back(s.data());
    argp.push_back(nullptr);
    ::execv(argp[0], argp.data());
    ::_exit(127);
  }
  fleet.add(exporter);
  ::close(out[1]);
  std::string line;
  for (char c; ::read(out[0], &c, 1) == 1 && c != '\n';) line += c;
  const auto at = line.find("port ");
  if (at == std::string::npos) {
    std::fprintf(stderr, "the exporter did not start: '%s'\n", line.c_str());
    return 1;
  }
  const int port = std::atoi(line.c_str() + at + 5);

  // The first scan's result: bounded polling (the exporter says nothing else).
  std::string body;
  const auto give_up = Clock::now() + std::chrono::seconds(120);
  while (Clock::now() < give_up) {
    auto got = http_get(port, "/metrics");
    if (got && sample(*got, "gpureap_last_success_timestamp_seconds").value_or(0) > 0) {
      body = *got;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (body.empty()) {
    std::fprintf(stderr, "no successful scan within 120 s\n");
    return 1;
  }
  unsigned series = 0, memory_series = 0;
  {
    std::istringstream in(body);
    for (std::string l; std::getline(in, l);) {
      if (l.empty() || l[0] == '#') continue;
      ++series;
      if (l.rfind("gpureap_gpu_process_memory_bytes{", 0) == 0) ++memory_series;
    }
  }

  // One scan's CPU: the exporter's CPU time over --cpu-scans scans, no scrape in
  // between (the utilization sampler's readings, every 2 s, included).
  const double scans0 = sample(body, "gpureap_scans_total").value_or(0);
  const double cpu0 = cpu_seconds(exporter);
  std::this_thread::sleep_for(std::chrono::duration<double>(cfg.interval_s * cfg.cpu_scans));
  const double cpu1 = cpu_seconds(exporter);
  auto after = http_get(port, "/metrics");
  const double scans1 = after ? sample(*after, "gpureap_scans_total").value_or(0) : 0;
  const double scan_s = after ? sample(*after, "gpureap_scan_duration_seconds").value_or(0) : 0;

  std::vector<double> ms;
  for (unsigned i = 0; i < cfg.scrapes; ++i) {
    const auto t0 = Clock::now();
    auto got = http_get(port, "/metrics");
    const auto t1 = Clock::now();
    if (!got) {
      std::fprintf(stderr, "scrape %u failed\n", i);
      return 1;
    }
    ms.push_back(std::chrono::duration<double, std::milli>(t1 - t0).count());
  }
  const long rss = status_kib(exporter, "VmRSS:");
  const long hwm = status_kib(exporter, "VmHWM:");
  const double cpu_per_scan = scans1 > scans0 ? (cpu1 - cpu0) / (scans1 - scans0) : -1;

  std::printf("gpureap exporter on %u GPU processes (%u simulated H200s), interval %g s, --max-process-series %u\n",
              cfg.procs, cfg.devices, cfg.interval_s, cfg.series == 0 ? cfg.procs : cfg.series);
  std::printf("  series per scrape        %u (%u per-process memory series), %zu bytes\n", series, memory_series,
              body.size());
  std::printf("  RSS                      %.1f MiB (peak %.1f MiB)   goal < 15 MiB; dcgm-exporter documents 135-500 MiB\n",
              static_cast<double>(rss) / 1024.0, static_cast<double>(hwm) / 1024.0);
  std::printf("  scrape latency           p50 %.2f ms, p99 %.2f ms over %u scrapes   goal p99 < 20 ms\n",
              percentile(ms, 0.5), percentile(ms, 0.99), cfg.scrapes);
  std::printf("  one scan                 %.0f ms CPU (%.0f scans measured), %.0f ms wall; %.2f %% of a core at this interval\n",
              cpu_per_scan * 1000, scans1 - scans0, scan_s * 1000, cpu_per_scan / cfg.interval_s * 100);
  const bool ok = static_cast<double>(rss) / 1024.0 < 15 && percentile(ms, 0.99) < 20;
  std::printf("  goals                    %s\n", ok ? "met" : "NOT met");
  return 0;
}
