// PID 1 of a fresh PID namespace (run under `unshare --pid --fork --mount-proc`)
// for the prestop tests: plays the container. Optionally holds a simulated GPU
// context itself (a GPU-using PID 1), starts the workers and waits for each
// one's ready line, runs `gpureap prestop` inside the namespace, then reports
// on stdout, as one JSON line starting with {"result": how prestop exited,
// how each worker ended (it is their parent, so waitpid tells TERM from KILL),
// and which signals reached PID 1 (all blocked, so any would be pending).
// Lines prestop wrote to /proc/1/fd/1 come before it on the same stdout.
// When this process exits the kernel ends everything left in the namespace.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "gpu/sim_client.hpp"

namespace {

using nlohmann::json;

constexpr int kWatched[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};

[[noreturn]] void die(const std::string& what) {
  std::fprintf(stderr, "prestop_ns_helper: %s\n", what.c_str());
  std::exit(70);
}

// fork + exec with the signal mask cleared; stdout to `out_fd` (or inherited when -1).
pid_t start(const std::vector<std::string>& argv, int out_fd, int err_fd = -1) {
  pid_t pid = ::fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (out_fd >= 0) ::dup2(out_fd, STDOUT_FILENO);
    if (err_fd >= 0) ::dup2(err_fd, STDERR_FILENO);
    // PID 1's own sim context is not close-on-exec (like a CUDA context): keep it ours.
    ::close_range(3, ~0U, 0);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    ::_exit(127);
  }
  return pid;
}

std::optional<std::string> read_line(int fd) {
  std::string line;
  char c = 0;
  for (;;) {
    const ssize_t n = ::read(fd, &c, 1);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    if (c == '\n') return line;
    line.push_back(c);
  }
}

std::string slurp(const std::string& path) {
  std::string out;
  if (FILE* f = std::fopen(path.c_str(), "r")) {
    char buf[4096];
    std::size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
  }
  return out;
}

// Moves `pid` (0: ourselves) into the cgroup whose cgroup.procs is `procs`.
void join_cgroup(const std::string& procs, pid_t pid) {
  FILE* f = std::fopen(procs.c_str(), "w");
  if (f == nullptr) die("open " + procs);
  const bool ok = std::fprintf(f, "%d\n", pid) > 0;
  if (std::fclose(f) != 0 || !ok) die("cannot move pid " + std::to_string(pid) + " into " + procs);
}

json wait_status(int status) {
  if (WIFEXITED(status)) return {{"state", "exited"}, {"code", WEXITSTATUS(status)}};
  if (WIFSIGNALED(status)) return {{"state", "signaled"}, {"signal", WTERMSIG(status)}};
  return {{"state", "other"}};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) die("usage: prestop_ns_helper CONFIG_JSON");
  const json config = json::parse(argv[1]);
  if (::getpid() != 1) die("must run as PID 1 of a new PID namespace");

  sigset_t watched;
  sigemptyset(&watched);
  for (int s : kWatched) sigaddset(&watched, s);
  ::sigprocmask(SIG_BLOCK, &watched, nullptr);

  // The "container": PID 1 joins a cgroup first, so every process it starts is in it.
  if (config.contains("cgroup_procs")) join_cgroup(config["cgroup_procs"].get<std::string>(), 0);

  std::optional<gpureap::gpu::sim::Context> own;
  if (config.value("pid1_gpu", false)) {
    const auto dir = gpureap::gpu::sim::resolve_sim_dir(std::nullopt, "/");
    auto ctx = gpureap::gpu::sim::create_context(dir, 0, 64ULL << 20);
    if (!ctx) die("pid 1 context: " + ctx.error().message);
    own.emplace(std::move(ctx.value()));
  }

  json workers = json::array();
  std::vector<pid_t> pids;
  std::vector<int> outs;
  for (const auto& w : config.value("workers", json::array())) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) die("pipe");
    const pid_t pid = start(w.at("argv").get<std::vector<std::string>>(), p[1]);
    ::close(p[1]);
    auto ready = read_line(p[0]);
    if (!ready) die("worker " + w.at("argv").dump() + " printed no ready line");
    outs.push_back(p[0]);  // kept open: a worker never gets SIGPIPE from us
    pids.push_back(pid);
    // A process of another container sharing the PID namespace (shareProcessNamespace).
    if (w.contains("cgroup_procs")) join_cgroup(w["cgroup_procs"].get<std::string>(), pid);
    workers.push_back({{"pid", pid}, {"ready", json::parse(*ready, nullptr, false)}});
  }

  const std::string out_dir = config.at("out_dir").get<std::string>();
  const std::string out_path = out_dir + "/prestop.out", err_path = out_dir + "/prestop.err";
  const int out_fd = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err_fd = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (out_fd < 0 || err_fd < 0) die("open prestop output files in " + out_dir);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t prestop = start(config.at("prestop").get<std::vector<std::string>>(), out_fd, err_fd);
  int status = 0;
  while (::waitpid(prestop, &status, 0) < 0 && errno == EINTR) {
  }
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  ::close(out_fd);
  ::close(err_fd);

  for (std::size_t i = 0; i < pids.size(); ++i) {
    int ws = 0;
    const pid_t r = ::waitpid(pids[i], &ws, WNOHANG);
    workers[i]["end"] = r == pids[i] ? wait_status(ws) : json{{"state", "alive"}};
  }
  sigset_t pending;
  sigemptyset(&pending);
  ::sigpending(&pending);
  json pid1_pending = json::array();
  for (int s : kWatched) {
    if (sigismember(&pending, s) == 1) pid1_pending.push_back(s);
  }

  json result = {{"result", true},
                 {"prestop", wait_status(status)},
                 {"prestop_wall_s", wall},
                 {"prestop_out", slurp(out_path)},
                 {"prestop_err", slurp(err_path)},
                 {"workers", workers},
                 {"pid1_pending", pid1_pending}};
  std::printf("%s\n", result.dump().c_str());
  std::fflush(stdout);
  return 0;
}
