// The built-in runtime: what runc does for the lab's purpose, in one file.
// PID 1 is cloned into new PID, mount, UTS and IPC namespaces, placed in its
// cgroup before it execs, and mounts the container's own /proc; an exec joins
// the cgroup and the namespaces of PID 1 through its pidfd (setns), then forks
// the command into the PID namespace, as runc exec does.
//
// The lab is multithreaded, so the cloned children run only raw system calls
// until execve: no malloc, no glibc fork or set*id wrappers (glibc's setxid
// would wait for the parent's threads, which the child does not have).
#include <fcntl.h>
#include <linux/sched.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "lab/runtime.hpp"
#include "sys/pidfd.hpp"

namespace gpureap::lab {

namespace {

constexpr int kContainerNamespaces = CLONE_NEWPID | CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC;

// The stage a child failed at, sent with errno over a close-on-exec pipe.
enum Stage : int {
  kSetupFds = 1,
  kMountPrivate,
  kMountProc,
  kHostname,
  kJoinCgroup,
  kSetns,
  kFork,
  kSetUser,
  kExec
};

const char* stage_name(int stage) {
  switch (stage) {
    case kSetupFds:
      return "set up descriptors";
    case kMountPrivate:
      return "make mounts private";
    case kMountProc:
      return "mount the container's /proc";
    case kHostname:
      return "set the hostname";
    case kJoinCgroup:
      return "join the pod's cgroup";
    case kSetns:
      return "enter the container's namespaces";
    case kFork:
      return "fork into the PID namespace";
    case kSetUser:
      return "switch user";
    case kExec:
      return "exec";
    default:
      return "start";
  }
}

struct CArrays {
  std::vector<std::string> storage;
  std::vector<char*> ptrs;
  explicit CArrays(std::vector<std::string> v) : storage(std::move(v)) {
    for (auto& s : storage) ptrs.push_back(s.data());
    ptrs.push_back(nullptr);
  }
};

pid_t raw_clone(std::uint64_t flags, int* pidfd) {
  clone_args args{};
  args.flags = flags;
  args.pidfd = reinterpret_cast<std::uint64_t>(pidfd);
  args.exit_signal = SIGCHLD;
  return static_cast<pid_t>(::syscall(SYS_clone3, &args, sizeof args));
}

[[noreturn]] void child_fail(int report_fd, int stage) {
  const int msg[2] = {stage, errno};
  [[maybe_unused]] ssize_t n = ::write(report_fd, msg, sizeof msg);
  ::_exit(127);
}

// Puts `fds[i]` at descriptor i (i = 0 …) and closes everything above. Copies
// to high numbers first so no target overwrites a source.
bool place_fds(const int* fds, int count) {
  int high[8];
  for (int i = 0; i < count; ++i) {
    high[i] = ::fcntl(fds[i], F_DUPFD, 64);
    if (high[i] < 0) return false;
  }
  for (int i = 0; i < count; ++i) {
    if (::dup2(high[i], i) < 0) return false;
  }
  return ::close_range(static_cast<unsigned>(count), ~0U, 0) == 0;
}

// The command gets what a freshly started process has: no blocked signals,
// default dispositions (exec keeps SIG_IGN, and the lab's threads block the
// signals it handles itself).
void reset_signals() {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig == SIGKILL || sig == SIGSTOP) continue;
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    ::sigaction(sig, &dfl, nullptr);
  }
  sigset_t none;
  sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

// Reads the failure report of a child: nullopt when the pipe closed empty
// (the child reached execve).
std::optional<sys::Error> read_report(int fd, const std::string& what) {
  int msg[2] = {0, 0};
  ssize_t n = 0;
  do n = ::read(fd, msg, sizeof msg);
  while (n < 0 && errno == EINTR);
  if (n <= 0) return std::nullopt;
  return sys::Error{msg[1],
                    what + ": could not " + stage_name(msg[0]) + ": " + std::strerror(msg[1])};
}

// What containerd keeps of a k8s.io task: its bundle's config.json with the
// CRI annotations (FACTS.md), which trace reads to name the pod. Removed with
// the container, as containerd removes it.
sys::Result<std::string> write_task_state(const std::string& node_root, const ContainerSpec& spec) {
  const std::string dir = containerd_task_dir(node_root, spec.container_id);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return sys::Error{ec.value(), "mkdir " + dir + ": " + ec.message()};
  const nlohmann::json config = {
      {"ociVersion", "1.0.2"},
      {"process", {{"args", spec.pid1_argv}, {"env", spec.env}, {"cwd", "/"}}},
      {"hostname", spec.pod},
      {"annotations", cri_annotations(spec)}};
  if (auto st = write_text_file(dir + "/config.json", config.dump(2) + "\n"); !st)
    return st.error();
  return dir;
}

class BuiltinContainer final : public Container {
 public:
  BuiltinContainer(PodCgroup cgroup, Spawned init, std::vector<std::string> env,
                   std::string state_dir)
      : cgroup_(std::move(cgroup)),
        init_(std::move(init)),
        env_(std::move(env)),
        state_dir_(std::move(state_dir)) {}

  ~BuiltinContainer() override {
    // Whatever the lab left running dies with PID 1 (the namespace's end).
    if (init_.running()) init_.kill_and_reap();
  }

  [[nodiscard]] pid_t init_pid() const override { return init_.pid(); }
  [[nodiscard]] int init_pidfd() const override { return init_.pidfd(); }
  [[nodiscard]] const PodCgroup& cgroup() const override { return cgroup_; }

  sys::Result<Spawned> exec(const ExecSpec& spec) override {
    if (spec.argv.empty()) return sys::Error{EINVAL, "exec: empty command"};
    auto join = cgroup_.open_procs_for_join();
    if (!join) return join.error();
    int report[2];
    if (::pipe2(report, O_CLOEXEC) != 0) return sys::errno_error(errno, "pipe2");
    sys::UniqueFd report_r(report[0]), report_w(report[1]);
    const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) return sys::errno_error(errno, "open /dev/null");
    sys::UniqueFd null_fd(devnull);
    std::vector<std::string> env = env_;
    env.insert(env.end(), spec.env.begin(), spec.env.end());
    CArrays argv(spec.argv);
    CArrays envp(std::move(env));
    const auto uid = static_cast<uid_t>(spec.uid);
    const int fds[6] = {devnull,
                        spec.stdout_fd >= 0 ? spec.stdout_fd : devnull,
                        spec.stderr_fd >= 0 ? spec.stderr_fd : devnull,
                        report[1],
                        join->get(),
                        init_.pidfd()};

    int helper_pidfd = -1;
    const pid_t helper = raw_clone(CLONE_PIDFD, &helper_pidfd);
    if (helper < 0) return sys::errno_error(errno, "clone3 (exec helper)");
    if (helper == 0) {
      // The helper: 0-2 stdio, 3 report (close-on-exec), 4 cgroup.procs, 5 PID 1's pidfd.
      if (!place_fds(fds, 6) || ::fcntl(3, F_SETFD, FD_CLOEXEC) != 0)
        child_fail(report[1], kSetupFds);
      if (::write(4, "0", 1) != 1) child_fail(3, kJoinCgroup);
      ::close(4);
      if (::setns(5, kContainerNamespaces) != 0) child_fail(3, kSetns);
      ::close(5);
      const pid_t cmd = raw_clone(0, nullptr);
      if (cmd < 0) child_fail(3, kFork);
      if (cmd == 0) {
        reset_signals();
        // Its own session, as runc gives every exec'd process: the session
        // and group it leaves behind tell trace who adopted its children.
        ::setsid();
        if (::chdir("/") != 0) child_fail(3, kSetns);
        if (uid != 0) {
          if (::syscall(SYS_setgroups, 0, nullptr) != 0 ||
              ::syscall(SYS_setresgid, uid, uid, uid) != 0 ||
              ::syscall(SYS_setresuid, uid, uid, uid) != 0) {
            child_fail(3, kSetUser);
          }
        }
        ::execve(argv.ptrs[0], argv.ptrs.data(), envp.ptrs.data());
        child_fail(3, kExec);
      }
      ::close(3);
      int status = 0;
      while (::waitpid(cmd, &status, 0) < 0 && errno == EINTR) {
      }
      ::_exit(WIFEXITED(status)     ? WEXITSTATUS(status)
              : WIFSIGNALED(status) ? 128 + WTERMSIG(status)
                                    : 255);
    }
    Spawned proc(helper, sys::UniqueFd(helper_pidfd));
    report_w.reset();
    if (auto err = read_report(report_r.get(), "exec " + spec.argv[0])) return *err;
    return proc;
  }

  std::optional<int> reap_init(Clock::duration timeout) override { return init_.wait(timeout); }

  // The cgroup tree goes with the lab's node; the task state goes now.
  void remove() override {
    std::error_code ec;
    std::filesystem::remove_all(state_dir_, ec);
  }

 private:
  PodCgroup cgroup_;
  Spawned init_;
  std::vector<std::string> env_;
  std::string state_dir_;
};

class BuiltinRuntime final : public Runtime {
 public:
  BuiltinRuntime(CgroupHierarchy hierarchy, std::string node_root)
      : hierarchy_(std::move(hierarchy)), node_root_(std::move(node_root)) {}
  [[nodiscard]] std::string_view name() const override { return "builtin"; }

  sys::Result<std::unique_ptr<Container>> start(const ContainerSpec& spec) override {
    if (spec.pid1_argv.empty()) return sys::Error{EINVAL, "start: empty PID 1 command"};
    PodCgroup cgroup(hierarchy_,
                     systemd_container_cgroup(spec.cgroup_parent, spec.pod_uid, spec.container_id));
    if (auto st = cgroup.create(); !st) return st.error();
    auto log = open_log(spec.log_path);
    if (!log) return log.error();
    const int devnull = ::open("/dev/null", O_RDWR | O_CLOEXEC);
    if (devnull < 0) return sys::errno_error(errno, "open /dev/null");
    sys::UniqueFd null_fd(devnull);
    int report[2];
    int gate[2];
    if (::pipe2(report, O_CLOEXEC) != 0) return sys::errno_error(errno, "pipe2");
    sys::UniqueFd report_r(report[0]), report_w(report[1]);
    if (::pipe2(gate, O_CLOEXEC) != 0) return sys::errno_error(errno, "pipe2");
    sys::UniqueFd gate_r(gate[0]), gate_w(gate[1]);
    CArrays argv(spec.pid1_argv);
    CArrays envp(spec.env);
    const std::string hostname = spec.pod;
    const int fds[5] = {devnull, log->get(), log->get(), report[1], gate[0]};

    int pidfd = -1;
    const pid_t pid =
        raw_clone(static_cast<std::uint64_t>(kContainerNamespaces) | CLONE_PIDFD, &pidfd);
    if (pid < 0) return sys::errno_error(errno, "clone3 (container PID 1)");
    if (pid == 0) {
      // PID 1: 0-2 stdio (the container log), 3 report (close-on-exec), 4 the gate.
      if (!place_fds(fds, 5) || ::fcntl(3, F_SETFD, FD_CLOEXEC) != 0)
        child_fail(report[1], kSetupFds);
      // Wait until the lab has put us in the pod's cgroup: every process of
      // the container starts inside it, as under a real runtime.
      char byte = 0;
      while (::read(4, &byte, 1) < 0 && errno == EINTR) {
      }
      ::close(4);
      if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0)
        child_fail(3, kMountPrivate);
      if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) {
        child_fail(3, kMountProc);
      }
      if (::sethostname(hostname.data(), hostname.size()) != 0) child_fail(3, kHostname);
      reset_signals();
      ::setsid();  // PID 1 leads the container's session, as under runc
      ::execve(argv.ptrs[0], argv.ptrs.data(), envp.ptrs.data());
      child_fail(3, kExec);
    }
    Spawned init(pid, sys::UniqueFd(pidfd));
    report_w.reset();
    gate_r.reset();
    if (auto st = cgroup.add(pid); !st) return st.error();  // `init` kills and reaps on return
    gate_w.reset();
    if (auto err = read_report(report_r.get(), "container " + spec.pod)) return *err;
    auto state = write_task_state(node_root_, spec);
    if (!state) return state.error();
    return std::unique_ptr<Container>(
        new BuiltinContainer(std::move(cgroup), std::move(init), spec.env, *state));
  }

 private:
  CgroupHierarchy hierarchy_;
  std::string node_root_;
};

}  // namespace

std::unique_ptr<Runtime> make_builtin_runtime(CgroupHierarchy hierarchy, std::string node_root) {
  return std::make_unique<BuiltinRuntime>(std::move(hierarchy), std::move(node_root));
}

}  // namespace gpureap::lab
