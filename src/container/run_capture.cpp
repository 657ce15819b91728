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
  bool ok = false;
  SpawnSetup() { ok = posix_spawn_file_actions_init(&actions) == 0 && posix_spawnattr_init(&attr) == 0; }
  SpawnSetup(const SpawnSetup&) = delete;
  SpawnSetup& operator=(const SpawnSetup&) = delete;
  ~SpawnSetup() {
    posix_spawn_file_actions_destroy(&actions);
    posix_spawnattr_destroy(&attr);
  }
};

}  // namespace

sys::Result<Captured> run_capture(const std::vector<std::string>& argv,
                                  std::chrono::milliseconds timeout, std::size_t max_bytes) {
  if (argv.empty()) return sys::Error{EINVAL, "run_capture: empty argv"};
  const std::string& what = argv.front();

  int fds[2] = {-1, -1};
  if (::pipe2(fds, O_CLOEXEC) != 0) return sys::errno_error(errno, "pipe for " + what);
  sys::UniqueFd rd(fds[0]);
  sys::UniqueFd wr(fds[1]);

  SpawnSetup setup;
  if (!setup.ok) return sys::Error{ENOMEM, "posix_spawn setup for " + what};
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
