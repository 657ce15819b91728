// Test harness for gpureap-init: start the init (optionally as PID 1 of a new
// PID namespace with its own /proc, optionally on a pseudo-terminal), read what
// it and its workload print, wait for it with a bounded pidfd poll. Every
// process a test starts is owned by an RAII guard that SIGKILLs and reaps it if
// the test ends early; killing the namespace's PID 1 takes the whole
// namespace with it, so nothing a test started outlives it.
#pragma once

#include <sys/types.h>

#include <csignal>
#include <string>
#include <vector>

namespace gpureap::init_test {

struct SpawnOptions {
  bool new_pid_ns = true;   // run as PID 1 of a new PID namespace
  bool mount_proc = true;   // with a private /proc (as a container has)
  bool tty = false;         // stdin/stdout/stderr on a new pty, which becomes the controlling terminal
  std::vector<std::string> env;  // extra NAME=VALUE
  std::vector<int> block;   // signals blocked when the init starts
  std::vector<int> ignore;  // signals ignored when the init starts
};

class Process {
 public:
  Process() = default;
  ~Process();
  Process(const Process&) = delete;
  Process& operator=(const Process&) = delete;

  // argv[0] is a path. False (with errno) when clone/pipe failed.
  bool start(const std::vector<std::string>& argv, const SpawnOptions& opt);

  pid_t pid() const { return pid_; }
  int pidfd() const { return pidfd_; }
  // Sends `sig` through the pidfd (to the init: our own child).
  bool signal(int sig) const;
  // Reads until stdout contains `needle` after what earlier calls consumed; returns the
  // text up to and including the line holding it ("" on timeout or EOF).
  std::string read_stdout_until(const std::string& needle, int timeout_ms = 10000);
  // Writes to the pty master (tty mode).
  bool write_tty(const std::string& text) const;
  // Waits for exit (bounded), drains output; returns the exit code as a shell shows it
  // (code, or 128+signal), -1 on timeout.
  int wait(int timeout_ms = 20000);

  const std::string& out() const { return out_; }
  const std::string& err() const { return err_; }

 private:
  bool pump(int timeout_ms);  // one poll round; false on timeout or when all streams hit EOF

  pid_t pid_ = -1;
  int pidfd_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;   // -1 in tty mode (stderr goes to the pty too)
  int tty_fd_ = -1;   // pty master
  bool reaped_ = false;
  std::string out_, err_;
  size_t consumed_ = 0;
};

// Escalation lines of the init: "escalated: SIGKILL pid=N comm=C after=S.SSSs gpu=yes|no ...".
struct Escalation {
  int pid = 0;
  double after = -1;
  bool gpu = false;
};
std::vector<Escalation> escalations(const std::string& err);
// Numbers following `prefix` on each line of `text` ("zombie 12" -> 12).
std::vector<int> numbers_after(const std::string& text, const std::string& prefix);

}  // namespace gpureap::init_test
