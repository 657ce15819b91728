#include "harness.hpp"

#include <fcntl.h>
#include <linux/sched.h>
#include <poll.h>
#include <pty.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>

extern char** environ;

namespace gpureap::init_test {

namespace {

int64_t now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

// Runs in the clone child: only async-signal-safe calls, then exec.
[[noreturn]] void child_exec(const SpawnOptions& opt, char* const* argv, char* const* envp, int in_fd, int out_fd,
                             int err_fd, int tty_slave) {
  if (opt.mount_proc && opt.new_pid_ns) {
    // Private propagation first, so the new /proc never shows up outside this mount namespace.
    if (::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ::_exit(120);
    if (::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr) != 0) ::_exit(121);
  }
  if (tty_slave >= 0) {
    if (::setsid() < 0) ::_exit(122);
    if (::ioctl(tty_slave, TIOCSCTTY, 0) != 0) ::_exit(123);
    in_fd = out_fd = err_fd = tty_slave;
  }
  if (::dup2(in_fd, 0) < 0 || ::dup2(out_fd, 1) < 0 || ::dup2(err_fd, 2) < 0) ::_exit(124);
  sigset_t mask;
  ::sigemptyset(&mask);
  for (int sig : opt.block) ::sigaddset(&mask, sig);
  for (int sig = 1; sig < 32; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  for (int sig : opt.ignore) ::signal(sig, SIG_IGN);
  if (::sigprocmask(SIG_SETMASK, &mask, nullptr) != 0) ::_exit(125);
  ::execve(argv[0], argv, envp);
  ::_exit(126);
}

}  // namespace

Process::~Process() {
  if (pid_ > 0 && !reaped_) {
    if (pidfd_ >= 0) ::syscall(SYS_pidfd_send_signal, pidfd_, SIGKILL, nullptr, 0U);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  for (int fd : {pidfd_, out_fd_, err_fd_, tty_fd_}) {
    if (fd >= 0) ::close(fd);
  }
}

bool Process::start(const std::vector<std::string>& command, const SpawnOptions& opt) {
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    if (!starts_with(*e, "TINI_") && !starts_with(*e, "GPUREAP_INIT_")) env_strings.emplace_back(*e);
  }
  for (const std::string& e : opt.env) env_strings.push_back(e);
  std::vector<char*> argv, envp;
  for (const std::string& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const std::string& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  int in_fd = -1, out_pipe[2] = {-1, -1}, err_pipe[2] = {-1, -1}, slave = -1;
  if (opt.tty) {
    if (::openpty(&tty_fd_, &slave, nullptr, nullptr, nullptr) != 0) return false;
    ::fcntl(tty_fd_, F_SETFD, FD_CLOEXEC);
    ::fcntl(slave, F_SETFD, FD_CLOEXEC);
  } else {
    in_fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in_fd < 0 || ::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) return false;
    out_fd_ = out_pipe[0];
    err_fd_ = err_pipe[0];
  }

  clone_args args{};
  args.flags = CLONE_PIDFD | (opt.new_pid_ns ? CLONE_NEWPID : 0) | (opt.new_pid_ns && opt.mount_proc ? CLONE_NEWNS : 0);
  args.pidfd = reinterpret_cast<uint64_t>(&pidfd_);
  args.exit_signal = SIGCHLD;
  long pid = ::syscall(SYS_clone3, &args, sizeof args);
  if (pid == 0) child_exec(opt, argv.data(), envp.data(), in_fd, out_pipe[1], err_pipe[1], slave);
  int saved = errno;
  for (int fd : {in_fd, out_pipe[1], err_pipe[1], slave}) {
    if (fd >= 0) ::close(fd);
  }
  if (pid < 0) {
    errno = saved;
    return false;
  }
  pid_ = static_cast<pid_t>(pid);
  return true;
}

bool Process::signal(int sig) const {
  return ::syscall(SYS_pidfd_send_signal, pidfd_, sig, nullptr, 0U) == 0;
}

bool Process::write_tty(const std::string& text) const {
  return ::write(tty_fd_, text.data(), text.size()) == static_cast<ssize_t>(text.size());
}

bool Process::pump(int timeout_ms) {
  pollfd fds[3];
  int* owners[3];
  std::string* sinks[3];
  nfds_t n = 0;
  auto add = [&](int& fd, std::string& sink) {
    if (fd < 0) return;
    fds[n] = pollfd{fd, POLLIN, 0};
    owners[n] = &fd;
    sinks[n] = &sink;
    ++n;
  };
  add(out_fd_, out_);
  add(err_fd_, err_);
  add(tty_fd_, out_);
  if (n == 0) return false;
  int ready = ::poll(fds, n, timeout_ms < 0 ? 0 : timeout_ms);
  if (ready <= 0) return false;
  for (nfds_t i = 0; i < n; ++i) {
    if (fds[i].revents == 0) continue;
    char buf[4096];
    ssize_t got = ::read(fds[i].fd, buf, sizeof buf);
    if (got > 0) {
      sinks[i]->append(buf, static_cast<size_t>(got));
    } else if (got == 0 || errno != EINTR) {  // EOF; EIO on a pty master once the slave is gone
      ::close(*owners[i]);
      *owners[i] = -1;
    }
  }
  return true;
}

std::string Process::read_stdout_until(const std::string& needle, int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    size_t at = out_.find(needle, consumed_);
    if (at != std::string::npos) {
      size_t eol = out_.find('\n', at);
      if (eol != std::string::npos) {
        std::string text = out_.substr(consumed_, eol + 1 - consumed_);
        consumed_ = eol + 1;
        return text;
      }
    }
    int64_t left = deadline - now_ms();
    if (left <= 0 || !pump(static_cast<int>(left))) {
      if (left <= 0 || (out_fd_ < 0 && tty_fd_ < 0)) return "";
    }
  }
}

int Process::wait(int timeout_ms) {
  int64_t deadline = now_ms() + timeout_ms;
  for (;;) {
    pollfd p{pidfd_, POLLIN, 0};
    if (::poll(&p, 1, 0) == 1) break;
    int64_t left = deadline - now_ms();
    if (left <= 0) return -1;
    if (!pump(static_cast<int>(left < 50 ? left : 50)) && out_fd_ < 0 && err_fd_ < 0 && tty_fd_ < 0) {
      ::poll(&p, 1, static_cast<int>(left));  // streams closed: wait on the pidfd alone
    }
  }
  // Exited: drain what the namespace wrote (its processes are gone, so EOF comes).
  while (now_ms() < deadline && pump(static_cast<int>(deadline - now_ms()))) {
  }
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  reaped_ = true;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

std::vector<Escalation> escalations(const std::string& err) {
  std::vector<Escalation> found;
  size_t at = 0;
  while ((at = err.find("escalated: SIGKILL pid=", at)) != std::string::npos) {
    Escalation e;
    const char* p = err.c_str() + at + std::strlen("escalated: SIGKILL pid=");
    e.pid = std::atoi(p);
    size_t eol = err.find('\n', at);
    std::string line = err.substr(at, eol == std::string::npos ? std::string::npos : eol - at);
    size_t a = line.find(" after=");
    if (a != std::string::npos) e.after = std::atof(line.c_str() + a + 7);
    e.gpu = line.find(" gpu=yes") != std::string::npos;
    found.push_back(e);
    at = eol == std::string::npos ? err.size() : eol;
  }
  return found;
}

std::vector<int> numbers_after(const std::string& text, const std::string& prefix) {
  std::vector<int> found;
  size_t at = 0;
  while ((at = text.find(prefix, at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n' || text[at - 1] == ' ' || text[at - 1] == '=') {
      found.push_back(std::atoi(text.c_str() + at + prefix.size()));
    }
    at += prefix.size();
  }
  return found;
}

}  // namespace gpureap::init_test
