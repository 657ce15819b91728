// Workloads for the gpureap-init black-box tests: each mode is one small,
// deterministic process tree that reports what it sees on stdout, one line per
// write(2) so lines from several processes never interleave. Readiness is
// reported on stdout; nothing here sleeps.
#include <fcntl.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdarg>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

void say(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
void say(const char* fmt, ...) {
  char buf[512];
  va_list ap;
  va_start(ap, fmt);
  int n = std::vsnprintf(buf, sizeof buf - 1, fmt, ap);
  va_end(ap);
  if (n < 0) return;
  size_t len = static_cast<size_t>(n) < sizeof buf - 1 ? static_cast<size_t>(n) : sizeof buf - 2;
  buf[len++] = '\n';
  while (::write(STDOUT_FILENO, buf, len) < 0 && errno == EINTR) {
  }
}

[[noreturn]] void die(const char* what) {
  say("helper error: %s: %s", what, std::strerror(errno));
  ::_exit(99);
}

pid_t fork_or_die() {
  pid_t pid = ::fork();
  if (pid < 0) die("fork");
  return pid;
}

void ignore(int sig) {
  if (::signal(sig, SIG_IGN) == SIG_ERR) die("signal");
}

[[noreturn]] void pause_forever() {
  for (;;) ::pause();
}

void block_all() {
  sigset_t all;
  ::sigfillset(&all);
  if (::sigprocmask(SIG_SETMASK, &all, nullptr) != 0) die("sigprocmask");
}

// Blocks every signal and reports each one it takes; returns on SIGTERM.
void report_signals(const char* who) {
  sigset_t all;
  ::sigfillset(&all);
  block_all();
  say("ready %s %d", who, static_cast<int>(::getpid()));
  for (;;) {
    int sig = ::sigwaitinfo(&all, nullptr);
    if (sig < 0) {
      if (errno == EINTR) continue;
      die("sigwaitinfo");
    }
    say("%s got %d", who, sig);
    if (sig == SIGTERM) return;
  }
}

// A pipe the parent reads one byte from once the child is set up.
struct Ready {
  int fds[2] = {-1, -1};
  Ready() {
    if (::pipe2(fds, O_CLOEXEC) != 0) die("pipe2");
  }
  void signal_ready() {
    char c = 'r';
    if (::write(fds[1], &c, 1) != 1) die("ready write");
  }
  void wait_ready() {
    char c = 0;
    ssize_t n = 0;
    while ((n = ::read(fds[0], &c, 1)) < 0 && errno == EINTR) {
    }
    if (n != 1) die("ready read");
  }
};

// Child that ignores SIGTERM (optionally in its own session and holding `path`
// open) and reports "<label> <pid>" once set up.
pid_t spawn_term_ignorer(const char* label, bool new_session, const char* path) {
  Ready ready;
  pid_t pid = fork_or_die();
  if (pid == 0) {
    if (new_session && ::setsid() < 0) die("setsid");
    if (path != nullptr && ::open(path, O_RDONLY) < 0) die("open gpu file");
    ignore(SIGTERM);
    ready.signal_ready();
    pause_forever();
  }
  ready.wait_ready();
  say("%s %d", label, static_cast<int>(pid));
  return pid;
}

void print_status_line(const char* key) {
  char buf[8192];
  int fd = ::open("/proc/self/status", O_RDONLY);
  if (fd < 0) die("open status");
  ssize_t n = ::read(fd, buf, sizeof buf - 1);
  ::close(fd);
  if (n <= 0) die("read status");
  buf[n] = '\0';
  const char* line = std::strstr(buf, key);
  if (line == nullptr) die("status key");
  const char* end = std::strchr(line, '\n');
  say("%.*s", static_cast<int>(end - line), line);
}

int run(int argc, char** argv) {
  const char* mode = argv[1];
  if (std::strcmp(mode, "exit") == 0 && argc == 3) return std::atoi(argv[2]);

  if (std::strcmp(mode, "raise") == 0 && argc == 3) {
    int sig = std::atoi(argv[2]);
    ::signal(sig, SIG_DFL);
    sigset_t one;
    ::sigemptyset(&one);
    ::sigaddset(&one, sig);
    ::sigprocmask(SIG_UNBLOCK, &one, nullptr);
    ::raise(sig);
    return 98;
  }

  if (std::strcmp(mode, "pause") == 0) {  // default dispositions: dies of most signals
    say("ready main %d", static_cast<int>(::getpid()));
    pause_forever();
  }

  if (std::strcmp(mode, "ignore-term") == 0) {  // the main child itself ignores SIGTERM
    ignore(SIGTERM);
    say("ready main %d", static_cast<int>(::getpid()));
    pause_forever();
  }

  if (std::strcmp(mode, "wait-signals") == 0) {
    report_signals("main");
    return 0;
  }

  if (std::strcmp(mode, "group-wait-signals") == 0) {  // main and a child in its process group
    Ready ready;
    pid_t pid = fork_or_die();
    if (pid == 0) {
      block_all();  // before reporting ready: a shutdown TERM must find it taking signals
      ready.signal_ready();  // still in main's group
      report_signals("member");
      ::_exit(0);
    }
    ready.wait_ready();
    report_signals("main");
    return 0;
  }

  if (std::strcmp(mode, "escaped-wait-signals") == 0) {  // a setsid() descendant that handles TERM
    Ready ready;
    pid_t pid = fork_or_die();
    if (pid == 0) {
      if (::setsid() < 0) die("setsid");
      block_all();
      ready.signal_ready();
      report_signals("escaped");
      ::_exit(0);
    }
    ready.wait_ready();
    say("ready main %d", static_cast<int>(::getpid()));
    pause_forever();
  }

  if (std::strcmp(mode, "stopped-child") == 0) {  // a child stopped (state T) that takes TERM once continued
    pid_t pid = fork_or_die();
    if (pid == 0) {
      block_all();
      ::raise(SIGSTOP);
      report_signals("stopped");
      ::_exit(0);
    }
    int status = 0;
    if (::waitpid(pid, &status, WUNTRACED) != pid || !WIFSTOPPED(status)) die("waitpid WUNTRACED");
    say("ready main %d", static_cast<int>(::getpid()));
    pause_forever();
  }

  if (std::strcmp(mode, "tree-ignore-term") == 0) {  // [setsid]: grandchild ignores TERM
    bool new_session = argc > 2 && std::strcmp(argv[2], "setsid") == 0;
    spawn_term_ignorer("grandchild", new_session, nullptr);
    say("ready main %d", static_cast<int>(::getpid()));
    pause_forever();
  }

  if (std::strcmp(mode, "gpu-and-plain") == 0 && argc == 3) {  // two TERM-ignorers, one holds the "GPU"
    spawn_term_ignorer("gpu", false, argv[2]);
    spawn_term_ignorer("plain", false, nullptr);
    say("ready main %d", static_cast<int>(::getpid()));
    pause_forever();
  }

  if (std::strcmp(mode, "orphan-ignore-term") == 0 && argc == 3) {  // leaves a TERM-ignorer behind
    spawn_term_ignorer("orphan", true, nullptr);
    return std::atoi(argv[2]);
  }

  if (std::strcmp(mode, "zombies") == 0 && argc == 3) {  // a grandchild's N children, never reaped by it
    int count = std::atoi(argv[2]);
    pid_t g = fork_or_die();
    if (g == 0) {
      for (int i = 0; i < count; ++i) {
        pid_t c = fork_or_die();
        if (c == 0) ::_exit(0);
        say("zombie %d", static_cast<int>(c));
      }
      ::_exit(0);  // its children are re-parented to the init
    }
    int status = 0;
    if (::waitpid(g, &status, 0) != g) die("waitpid");
    say("done");
    return 0;
  }

  if (std::strcmp(mode, "double-fork") == 0) {
    Ready ready;
    pid_t g = fork_or_die();
    if (g == 0) {
      pid_t h = fork_or_die();
      if (h == 0) {
        ready.wait_ready();  // exits only once its parent is gone: an orphan for the init to reap
        ::_exit(0);
      }
      say("grandchild %d", static_cast<int>(h));
      ::_exit(0);
    }
    int status = 0;
    if (::waitpid(g, &status, 0) != g) die("waitpid");
    ready.signal_ready();
    say("done");
    return 0;
  }

  if (std::strcmp(mode, "sigstate") == 0) {
    print_status_line("SigBlk:");
    print_status_line("SigIgn:");
    return 0;
  }

  if (std::strcmp(mode, "tty") == 0) {  // job control: report our group and the terminal's
    say("pid %d pgrp %d fg %d", static_cast<int>(::getpid()), static_cast<int>(::getpgrp()),
        static_cast<int>(::tcgetpgrp(STDIN_FILENO)));
    say("ready main %d", static_cast<int>(::getpid()));
    pause_forever();
  }

  if (std::strcmp(mode, "pid1-stub") == 0 && argc > 2) {  // PID 1 of a test namespace, runs argv[2..] as pid 2
    pid_t pid = fork_or_die();
    if (pid == 0) {
      ::execv(argv[2], argv + 2);
      die("execv");
    }
    for (;;) {
      int status = 0;
      pid_t got = ::waitpid(-1, &status, 0);
      if (got < 0 && errno == EINTR) continue;
      if (got < 0) die("waitpid");
      if (got != pid) continue;
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
  }

  say("helper: unknown mode %s", mode);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return 2;
  return run(argc, argv);
}
