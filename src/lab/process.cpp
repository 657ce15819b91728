#include "lab/process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "sys/pidfd.hpp"

namespace gpureap::lab {

namespace {

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

Spawned::Spawned(Spawned&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)), pidfd_(std::move(other.pidfd_)) {}

Spawned& Spawned::operator=(Spawned&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    pidfd_ = std::move(other.pidfd_);
  }
  return *this;
}

Spawned::~Spawned() {
  kill_and_reap();
}

void Spawned::kill_and_reap() {
  if (pid_ <= 0) return;
  if (pidfd_) (void)sys::pidfd_send_signal(pidfd_.get(), SIGKILL);
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  pidfd_.reset();
}

std::optional<int> Spawned::wait(std::optional<Clock::duration> timeout) {
  if (pid_ <= 0) return std::nullopt;
  const auto deadline = timeout ? std::optional(Clock::now() + *timeout) : std::nullopt;
  for (;;) {
    int wait_ms = -1;
    if (deadline) {
      const auto left =
          std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now()).count();
      if (left <= 0) return std::nullopt;
      wait_ms = static_cast<int>(std::min<long long>(left, 1 << 30));
    }
    pollfd p{pidfd_.get(), POLLIN, 0};
    const int rc = ::poll(&p, 1, wait_ms);
    if (rc < 0 && errno == EINTR) continue;
    if (rc == 0) return std::nullopt;
    break;
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  pidfd_.reset();
  return shell_status(status);
}

int shell_status(int wait_status) {
  if (WIFEXITED(wait_status)) return WEXITSTATUS(wait_status);
  if (WIFSIGNALED(wait_status)) return 128 + WTERMSIG(wait_status);
  return 255;
}

sys::Result<Spawned> spawn(const std::vector<std::string>& argv,
                           const std::vector<std::string>& env, int stdout_fd, int stderr_fd) {
  if (argv.empty()) return sys::Error{EINVAL, "spawn: empty command"};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  if (stdout_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, stdout_fd, STDOUT_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  }
  if (stderr_fd >= 0) {
    posix_spawn_file_actions_adddup2(&actions, stderr_fd, STDERR_FILENO);
  } else {
    posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  }
  // Nothing of the lab's (pipes of other scenarios, NVML's device descriptors)
  // leaks into what it starts.
  posix_spawn_file_actions_addclosefrom_np(&actions, 3);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none;
  sigemptyset(&none);
  posix_spawnattr_setsigmask(&attr, &none);
  sigset_t all;
  sigfillset(&all);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  auto args = c_strings(argv);
  auto envp = c_strings(env);
  pid_t pid = -1;
  const int rc = ::posix_spawn(&pid, argv[0].c_str(), &actions, &attr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return sys::errno_error(rc, "start " + argv[0]);
  auto fd = sys::pidfd_open(pid);
  if (!fd) {
    // Our own unreaped child cannot be gone: pidfd_open failing means no pidfd support.
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);
    return fd.error();
  }
  return Spawned(pid, std::move(*fd));
}

sys::Result<int> run_to_files(const std::vector<std::string>& argv,
                              const std::vector<std::string>& env, const std::string& stdout_path,
                              const std::string& stderr_path, Clock::duration timeout) {
  auto out = open_truncated(stdout_path);
  if (!out) return out.error();
  auto err = open_truncated(stderr_path);
  if (!err) return err.error();
  auto proc = spawn(argv, env, out->get(), err->get());
  if (!proc) return proc.error();
  auto status = proc->wait(timeout);
  if (!status) return sys::Error{ETIMEDOUT, argv[0] + " ran past its time limit"};
  return *status;
}

std::vector<std::string> environment_with(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  auto key_of = [](const std::string& kv) { return kv.substr(0, kv.find('=')); };
  for (char** e = environ; *e != nullptr; ++e) {
    std::string kv(*e);
    bool overridden = false;
    for (const auto& x : extra) overridden = overridden || key_of(x) == key_of(kv);
    if (!overridden) env.push_back(std::move(kv));
  }
  for (const auto& x : extra) env.push_back(x);
  return env;
}

std::optional<std::string> find_program(const std::string& name,
                                        const std::vector<std::string>& dirs) {
  auto executable = [](const std::string& path) {
    struct stat st {};
    return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
           ::access(path.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return name;
    return std::nullopt;
  }
  for (const auto& d : dirs) {
    std::string candidate = d;
    candidate.append("/").append(name);
    if (executable(candidate)) return candidate;
  }
  const char* path = std::getenv("PATH");
  std::string_view rest = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin";
  while (!rest.empty()) {
    const auto colon = rest.find(':');
    std::string candidate(rest.substr(0, colon));
    rest = colon == std::string_view::npos ? std::string_view{} : rest.substr(colon + 1);
    if (candidate.empty()) continue;
    candidate.append("/").append(name);
    if (executable(candidate)) return candidate;
  }
  return std::nullopt;
}

sys::Result<sys::UniqueFd> open_truncated(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return sys::errno_error(errno, "create " + path);
  return sys::UniqueFd(fd);
}

sys::Status write_text_file(const std::string& path, std::string_view text) {
  auto fd = open_truncated(path);
  if (!fd) return fd.error();
  while (!text.empty()) {
    const ssize_t n = ::write(fd->get(), text.data(), text.size());
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return sys::errno_error(errno, "write " + path);
    text.remove_prefix(static_cast<std::size_t>(n));
  }
  return sys::Ok{};
}

sys::Result<sys::UniqueFd> open_log(const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return sys::errno_error(errno, "create " + path);
  return sys::UniqueFd(fd);
}

}  // namespace gpureap::lab
