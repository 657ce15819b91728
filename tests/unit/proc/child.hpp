// Real child processes for tests. Each Child is owned by the test that started
// it: the destructor SIGKILLs and reaps exactly that pid, so a failing ASSERT
// never leaks a process, and nothing the test did not start is ever signalled.
// Readiness is a byte on a pipe, never a sleep.
#pragma once

#include <fcntl.h>
#include <linux/close_range.h>
#include <sched.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

namespace gpureap::proc::test {

class Child {
 public:
  Child() = default;
  explicit Child(pid_t pid) : pid_(pid) {}
  Child(const Child&) = delete;
  Child& operator=(const Child&) = delete;
  Child(Child&& o) noexcept : pid_(o.pid_) { o.pid_ = -1; }
  ~Child() { reap(); }

  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool started() const { return pid_ > 0; }
  // The caller reaped it: forget the pid, so it is never signalled again.
  pid_t release() {
    pid_t p = pid_;
    pid_ = -1;
    return p;
  }

  // SIGKILL (harmless on a zombie: the pid stays ours until reaped) and reap.
  void reap() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }

 private:
  pid_t pid_ = -1;
};

// In the child: the two pipe ends move to fds 100/101 and every other inherited
// descriptor is closed, so the test controls the child's fd table exactly.
constexpr int kReadyFd = 100;
constexpr int kHoldFd = 101;

// Child side, async-signal-safe only: tell the parent we are ready, then block
// until the parent closes the hold pipe (or dies: PDEATHSIG), then exit.
[[noreturn]] inline void child_ready_and_wait() {
  char c = 'r';
  (void)!::write(kReadyFd, &c, 1);
  (void)!::read(kHoldFd, &c, 1);
  ::_exit(0);
}

struct Pipes {
  int ready[2] = {-1, -1};
  int hold[2] = {-1, -1};
  bool ok() const { return ready[0] >= 0 && hold[0] >= 0; }
  Pipes() {
    if (::pipe2(ready, O_CLOEXEC) != 0) ready[0] = -1;
    if (::pipe2(hold, O_CLOEXEC) != 0) hold[0] = -1;
  }
  ~Pipes() {
    for (int fd : {ready[0], ready[1], hold[0], hold[1]}) {
      if (fd >= 0) ::close(fd);
    }
  }
  Pipes(const Pipes&) = delete;
  Pipes& operator=(const Pipes&) = delete;

  // Called in the child right after fork/clone.
  void child_setup() const {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(ready[1], kReadyFd);
    ::dup2(hold[0], kHoldFd);
    ::syscall(SYS_close_range, 0u, static_cast<unsigned>(kReadyFd - 1), 0u);
    ::syscall(SYS_close_range, static_cast<unsigned>(kHoldFd + 1), ~0u, 0u);
  }
  // Parent: blocks until the child wrote its ready byte. False if it died first.
  bool wait_ready() {
    ::close(ready[1]);
    ready[1] = -1;
    char c = 0;
    ssize_t n = 0;
    do {
      n = ::read(ready[0], &c, 1);
    } while (n < 0 && errno == EINTR);
    return n == 1;
  }
};

// fork(); the child runs `setup` (async-signal-safe work: open(), dup()...),
// reports ready and blocks. Returns the Child once it is ready.
template <class Fn>
Child spawn_ready(Pipes& pipes, Fn&& setup) {
  pid_t pid = ::fork();
  if (pid == 0) {
    pipes.child_setup();
    setup();
    child_ready_and_wait();
  }
  Child child(pid);
  if (pid > 0 && !pipes.wait_ready()) child.reap();
  return child;
}

// Returns once the boot-time clock has passed into the next clock tick (the
// unit of a process's start time). A process that started in the tick a
// kernel scan starts in may have opened descriptors after the iterator
// passed it, so the scan walks /proc for it (kernel_fds.hpp: started_ticks);
// tests that must see the iterator's answer for their children wait this out.
inline void after_this_clock_tick() {
  const long hz = ::sysconf(_SC_CLK_TCK);
  const std::int64_t ns_per_tick = 1000000000 / (hz > 0 ? hz : 100);
  timespec now{};
  ::clock_gettime(CLOCK_BOOTTIME, &now);
  const std::int64_t ns = now.tv_sec * 1000000000LL + now.tv_nsec;
  const std::int64_t next = (ns / ns_per_tick + 1) * ns_per_tick;
  timespec until{static_cast<time_t>(next / 1000000000), static_cast<long>(next % 1000000000)};
  while (::clock_nanosleep(CLOCK_BOOTTIME, TIMER_ABSTIME, &until, nullptr) == EINTR) {
  }
}

}  // namespace gpureap::proc::test
