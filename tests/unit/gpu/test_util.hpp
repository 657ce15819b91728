// Helpers for tests that run real processes: a guard that kills and reaps the
// children a test started (even when an assertion fails), pipes, and a line
// reader with a timeout so a broken child fails the test instead of hanging it.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "sys/host_root.hpp"

namespace gpureap::testing {

// Whole file as text; empty when unreadable. (istreambuf_iterator trips
// g++ 12's -Wnull-dereference inside libstdc++.)
inline std::string read_text(const std::string& path) {
  auto r = sys::read_file_at(AT_FDCWD, path.c_str(), path);
  return r.ok() ? *r : std::string();
}

// A fresh directory under $TMPDIR, removed with everything in it.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "gpureap-gpu-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    if (!path_.empty()) std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Kills (SIGKILL) and reaps the processes registered with it: only pids this
// test started or adopted as subreaper, never anything else.
class Children {
 public:
  Children() = default;
  Children(const Children&) = delete;
  Children& operator=(const Children&) = delete;
  ~Children() {
    for (pid_t p : pids_) {
      ::kill(p, SIGKILL);
      ::waitpid(p, nullptr, 0);  // ECHILD for a non-child: harmless
    }
  }
  void add(pid_t p) { pids_.push_back(p); }
  // SIGKILL (or `sig`) and wait; returns the wait status.
  int kill_and_reap(pid_t p, int sig = SIGKILL) {
    ::kill(p, sig);
    return reap(p);
  }
  int reap(pid_t p) {
    int status = 0;
    while (::waitpid(p, &status, 0) < 0 && errno == EINTR) {
    }
    pids_.erase(std::remove(pids_.begin(), pids_.end(), p), pids_.end());
    return status;
  }

 private:
  std::vector<pid_t> pids_;
};

// Orphans of the processes a test starts are reparented to the test process,
// so it can reap them (and the guard can clean them up).
inline void become_subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); }

class Pipe {
 public:
  Pipe() {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) == 0) {
      r_ = p[0];
      w_ = p[1];
    }
  }
  ~Pipe() {
    close_read();
    close_write();
  }
  Pipe(const Pipe&) = delete;
  Pipe& operator=(const Pipe&) = delete;
  [[nodiscard]] int r() const { return r_; }
  [[nodiscard]] int w() const { return w_; }
  void close_read() {
    if (r_ >= 0) ::close(r_);
    r_ = -1;
  }
  void close_write() {
    if (w_ >= 0) ::close(w_);
    w_ = -1;
  }

 private:
  int r_ = -1;
  int w_ = -1;
};

// Reads exactly sizeof(T) bytes, waiting at most `timeout_ms` in all.
template <class T>
std::optional<T> read_value(int fd, int timeout_ms = 10000) {
  T v{};
  auto* p = reinterpret_cast<char*>(&v);
  std::size_t got = 0;
  while (got < sizeof v) {
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return std::nullopt;
    ssize_t n = ::read(fd, p + got, sizeof v - got);
    if (n <= 0) return std::nullopt;
    got += static_cast<std::size_t>(n);
  }
  return v;
}

template <class T>
void write_value(int fd, const T& v) {
  [[maybe_unused]] ssize_t n = ::write(fd, &v, sizeof v);
}

// One '\n'-terminated line; nullopt on EOF or timeout. `buffer` keeps what
// was read past the line for the next call.
inline std::optional<std::string> read_line(int fd, std::string& buffer, int timeout_ms = 10000) {
  for (;;) {
    auto nl = buffer.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      return line;
    }
    pollfd pfd{fd, POLLIN, 0};
    if (::poll(&pfd, 1, timeout_ms) <= 0) return std::nullopt;
    char buf[4096];
    ssize_t n = ::read(fd, buf, sizeof buf);
    if (n <= 0) return std::nullopt;
    buffer.append(buf, static_cast<std::size_t>(n));
  }
}

// Blocks until `pid` (our child) has exited, without reaping it: it stays a zombie.
inline bool wait_zombie(pid_t pid) {
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0) {
    if (errno != EINTR) return false;
  }
  return true;
}

}  // namespace gpureap::testing
