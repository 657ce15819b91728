// run_capture: posix_spawn + poll on a pipe + waitpid, all bounded by one
// deadline. posix_spawn (not fork) because the caller may be multi-threaded.
#include "container/run_capture.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "sys/unique_fd.hpp"

extern char** environ;  // NOLINT: POSIX's name, read-only here

namespace gpureap::container {
namespace {

using Clock = std::chrono::steady_clock;

int ms_left(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  if (left.count() <= 0) return 0;
  return left.count() > 60'000 ? 60'000 : static_cast<int>(left.count());
}

void kill_group(pid_t pid) {
  ::kill(-pid, SIGKILL);  // the helper and anything it started
  ::kill(pid, SIGKILL);   // in case setpgid did not happen
}

int wait_blocking(pid_t pid) {
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return status;
}

// Owns the spawn attributes so every return path destroys them.
struct SpawnSetup {
  posix_spawn_file_actions_t actions{};
  posix_spawnattr_t attr{};
  bool actions_ok = false;
  bool attr_ok = false;
  SpawnSetup()
      : actions_ok(posix_spawn_file_actions_init(&actions) == 0),
        attr_ok(posix_spawnattr_init(&attr) == 0) {}
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  ~SpawnSetup() {
    if (actions_ok) posix_spawn_file_actions_destroy(&actions);
    if (attr_ok) posix_spawnattr_destroy(&attr);
  }
};

// A caller started with stdin/stdout closed (an NPD plugin, a hook) can get
// pipe fds 0-2; the child's redirections onto 0-2 would then clobber them, or
// be a dup2(fd, fd) that leaves FD_CLOEXEC set on libcs older than POSIX 2024's
// rule (glibc >= 2.35 clears it). Move such an fd above stdio first.
sys::UniqueFd above_stdio(sys::UniqueFd fd) {
  if (fd.get() > 2) return fd;
  const int moved = ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3);
  if (moved < 0) return sys::UniqueFd();
  return sys::UniqueFd(moved);
}

}  // namespace

sys::Result<Captured> run_capture(const std::vector<std::string>& argv,
                                  std::chrono::milliseconds timeout, std::size_t max_bytes) {
  if (argv.empty()) return sys::Error{EINVAL, "run_capture: empty argv"};
  const std::string& what = argv.front();

  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) return sys::errno_error(errno, "pipe for " + what);
  sys::UniqueFd rd = above_stdio(sys::UniqueFd(fds[0]));
  sys::UniqueFd wr = above_stdio(sys::UniqueFd(fds[1]));
  if (!rd || !wr) return sys::errno_error(errno, "pipe for " + what);

  SpawnSetup setup;
  if (!setup.actions_ok || !setup.attr_ok) return sys::Error{ENOMEM, "posix_spawn setup for " + what};
  posix_spawn_file_actions_addopen(&setup.actions, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_adddup2(&setup.actions, wr.get(), 1);
  posix_spawn_file_actions_addopen(&setup.actions, 2, "/dev/null", O_WRONLY, 0);
  sigset_t none;
  sigemptyset(&none);
  sigset_t defaults;
  sigemptyset(&defaults);
  sigaddset(&defaults, SIGPIPE);
  sigaddset(&defaults, SIGTERM);
  sigaddset(&defaults, SIGINT);
  posix_spawnattr_setsigmask(&setup.attr, &none);
  posix_spawnattr_setsigdefault(&setup.attr, &defaults);
  posix_spawnattr_setpgroup(&setup.attr, 0);
  posix_spawnattr_setflags(&setup.attr, static_cast<short>(POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK |
                                                           POSIX_SPAWN_SETSIGDEF));

  std::vector<std::string> args(argv);  // posix_spawn wants char* const[]
  std::vector<char*> cargv;
  cargv.reserve(args.size() + 1);
  for (auto& a : args) cargv.push_back(a.data());
  cargv.push_back(nullptr);

  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, what.c_str(), &setup.actions, &setup.attr, cargv.data(), environ);
  if (rc != 0) return sys::errno_error(rc, "spawn " + what);
  wr.reset();  // our copy: EOF arrives when the child (and its children) close theirs

  const auto deadline = Clock::now() + timeout;
  Captured cap;
  char buf[8192];
  for (;;) {
    const int left = ms_left(deadline);
    if (left == 0) {
      kill_group(pid);
      wait_blocking(pid);
      return sys::Error{ETIMEDOUT, what + ": no answer within the timeout"};
    }
    pollfd p{rd.get(), POLLIN, 0};
    const int pr = ::poll(&p, 1, left);
    if (pr < 0) {
      if (errno == EINTR) continue;
      const int saved = errno;
      kill_group(pid);
      wait_blocking(pid);
      return sys::errno_error(saved, "poll " + what);
    }
    if (pr == 0) continue;  // deadline check at the top
    const ssize_t n = ::read(rd.get(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      const int saved = errno;
      kill_group(pid);
      wait_blocking(pid);
      return sys::errno_error(saved, "read " + what);
    }
    if (n == 0) break;
    cap.out.append(buf, static_cast<std::size_t>(n));
    if (cap.out.size() > max_bytes) {
      kill_group(pid);
      wait_blocking(pid);
      return sys::Error{EFBIG, what + ": output too large"};
    }
  }

  // stdout is closed; the child should be exiting. Still bounded by the deadline.
  int status = 0;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) return sys::errno_error(errno, "waitpid " + what);
    if (ms_left(deadline) == 0) {
      kill_group(pid);
      wait_blocking(pid);
      return sys::Error{ETIMEDOUT, what + ": did not exit within the timeout"};
    }
    const timespec nap{0, 2'000'000};
    ::nanosleep(&nap, nullptr);
  }
  cap.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return cap;
}

}  // namespace gpureap::container
