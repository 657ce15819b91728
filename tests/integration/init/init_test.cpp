// Black-box tests of gpureap-init: tini's and dumb-init's behaviour lists, then
// the shutdown escalation. The init runs as PID 1 of a fresh PID namespace with
// its own /proc unless a test says otherwise. Synchronisation is by pipes and
// pidfds only; the grace periods under test are at most 1 s.
#include <cstdio>
#include <cstring>
#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "harness.hpp"

namespace gpureap::init_test {
namespace {

const std::string kInit = GPUREAP_INIT_BIN;
const std::string kHelper = GPUREAP_INIT_HELPER_BIN;

std::vector<std::string> cmd(std::vector<std::string> init_args, std::vector<std::string> helper_args) {
  std::vector<std::string> argv{kInit};
  argv.insert(argv.end(), init_args.begin(), init_args.end());
  argv.push_back("--");
  argv.push_back(kHelper);
  argv.insert(argv.end(), helper_args.begin(), helper_args.end());
  return argv;
}

int run_to_exit(const std::vector<std::string>& argv, const SpawnOptions& opt = {}, std::string* err = nullptr) {
  Process p;
  if (!p.start(argv, opt)) return -2;
  int code = p.wait();
  if (err != nullptr) *err = p.err();
  return code;
}

SpawnOptions no_namespace() {
  SpawnOptions o;
  o.new_pid_ns = false;
  return o;
}
SpawnOptions host_proc() {
  SpawnOptions o;
  o.mount_proc = false;
  return o;
}
SpawnOptions on_tty() {
  SpawnOptions o;
  o.tty = true;
  return o;
}
SpawnOptions with_env(std::vector<std::string> env) {
  SpawnOptions o;
  o.env = std::move(env);
  return o;
}

double elapsed_s(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

// A temporary directory standing in for the simulated GPU's device directory.
struct TempDir {
  std::string path;
  TempDir() {
    char tmpl[] = "/tmp/gpureap-init-test.XXXXXX";
    const char* made = ::mkdtemp(tmpl);
    if (made != nullptr) path = made;
  }
  ~TempDir() {
    if (path.empty()) return;
    std::remove((path + "/nvidia0").c_str());
    ::rmdir(path.c_str());
  }
};

// ---- command line (tini's) ----

TEST(InitCli, HelpExitsZero) {
  std::string err;
  Process p;
  ASSERT_TRUE(p.start({kInit, "-h"}, no_namespace()));
  EXPECT_EQ(p.wait(), 0);
  EXPECT_NE(p.out().find("--gpu-grace"), std::string::npos);
}

TEST(InitCli, VersionExitsZero) {
  Process p;
  ASSERT_TRUE(p.start({kInit, "--version"}, no_namespace()));
  EXPECT_EQ(p.wait(), 0);
  EXPECT_NE(p.out().find("gpureap-init version"), std::string::npos);
}

TEST(InitCli, BadOptionExitsOne) { EXPECT_EQ(run_to_exit({kInit, "-Z", "--", kHelper, "exit", "0"}), 1); }

TEST(InitCli, NoProgramExitsOne) { EXPECT_EQ(run_to_exit({kInit}), 1); }

TEST(InitCli, BadRemapValueExitsOne) { EXPECT_EQ(run_to_exit(cmd({"-e", "256"}, {"exit", "0"})), 1); }

TEST(InitCli, BadGraceExitsOne) { EXPECT_EQ(run_to_exit(cmd({"--grace", "soon"}, {"exit", "0"})), 1); }

TEST(InitCli, VerbosityFromTheEnvironment) {
  std::string err;
  EXPECT_EQ(run_to_exit(cmd({}, {"exit", "0"}), with_env({"TINI_VERBOSITY=2"}), &err), 0);
  EXPECT_NE(err.find("spawned child process"), std::string::npos) << err;
  EXPECT_EQ(run_to_exit(cmd({}, {"exit", "0"}), {}, &err), 0);
  EXPECT_EQ(err, "");  // default verbosity: quiet when all is well
}

TEST(InitCli, MissingProgramExits127) {
  std::string err;
  EXPECT_EQ(run_to_exit({kInit, "--", "/nonexistent/program"}, {}, &err), 127);
  EXPECT_NE(err.find("exec /nonexistent/program failed: ENOENT"), std::string::npos) << err;
}

TEST(InitCli, NotExecutableExits126) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string file = dir.path + "/nvidia0";  // removed by TempDir
  std::ofstream(file) << "#!/bin/sh\n";
  ASSERT_EQ(::chmod(file.c_str(), 0644), 0);
  EXPECT_EQ(run_to_exit({kInit, "--", file}), 126);
}

// ---- exit codes ----

TEST(InitExit, PassesEveryExitCode0To255) {
#ifdef __SANITIZE_ADDRESS__
  constexpr int kStep = 15;  // sanitized process start-up is ~0.4 s: sample the range (0, 15, ..., 255)
#else
  constexpr int kStep = 1;
#endif
  for (int code = 0; code <= 255; code += kStep) {
    ASSERT_EQ(run_to_exit(cmd({}, {"exit", std::to_string(code)}), host_proc()), code) << code;
  }
}

TEST(InitExit, RemapsListedCodesToZero) {
  EXPECT_EQ(run_to_exit(cmd({"-e", "3", "-e", "143"}, {"exit", "3"})), 0);
  EXPECT_EQ(run_to_exit(cmd({"-e", "3", "-e", "143"}, {"exit", "4"})), 4);
  EXPECT_EQ(run_to_exit(cmd({"-e", "143"}, {"raise", "15"})), 0);  // 128+SIGTERM remapped too, as tini
}

TEST(InitExit, ChildKilledBySignalGives128PlusSignal) {
  EXPECT_EQ(run_to_exit(cmd({}, {"raise", "9"})), 137);
  EXPECT_EQ(run_to_exit(cmd({}, {"raise", "11"})), 139);
}

// ---- signals ----

class InitSignalExit : public ::testing::TestWithParam<int> {};

TEST_P(InitSignalExit, SignalToInitKillsDefaultChildWith128PlusSignal) {
  int sig = GetParam();
  Process p;
  ASSERT_TRUE(p.start(cmd({}, {"pause"}), {}));
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  ASSERT_TRUE(p.signal(sig));
  EXPECT_EQ(p.wait(), 128 + sig) << p.err();
}

INSTANTIATE_TEST_SUITE_P(TermUsr1Usr2Hup, InitSignalExit, ::testing::Values(SIGTERM, SIGUSR1, SIGUSR2, SIGHUP, SIGINT));

TEST(InitSignals, ForwardsEveryCatchableSignal1To31) {
  Process p;
  ASSERT_TRUE(p.start(cmd({}, {"wait-signals"}), {}));
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  for (int sig = 1; sig < 32; ++sig) {
    // KILL/STOP cannot be caught, CHLD is the init's own; TERM/INT/QUIT start the shutdown (tested below).
    if (sig == SIGKILL || sig == SIGSTOP || sig == SIGCHLD || sig == SIGTERM || sig == SIGINT || sig == SIGQUIT) {
      continue;
    }
    ASSERT_TRUE(p.signal(sig));
    EXPECT_NE(p.read_stdout_until("main got " + std::to_string(sig) + "\n", 5000), "") << "signal " << sig;
  }
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_NE(p.read_stdout_until("main got 15"), "");
  EXPECT_EQ(p.wait(), 0) << p.err();
}

TEST(InitSignals, ShutdownSignalReachesChildUnchanged) {
  for (int sig : {SIGINT, SIGQUIT}) {
    Process p;
    ASSERT_TRUE(p.start(cmd({"--grace", "1"}, {"wait-signals"}), {}));
    ASSERT_NE(p.read_stdout_until("ready main"), "");
    ASSERT_TRUE(p.signal(sig));
    EXPECT_NE(p.read_stdout_until("main got " + std::to_string(sig) + "\n", 5000), "");
    // The helper only exits on TERM: the escalation ends it after --grace.
    EXPECT_EQ(p.wait(), 137);
    ASSERT_EQ(escalations(p.err()).size(), 1u) << p.err();
  }
}

TEST(InitSignals, ProcessGroupForwardingWithDashG) {
  Process p;
  ASSERT_TRUE(p.start(cmd({"-g"}, {"group-wait-signals"}), {}));
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  ASSERT_TRUE(p.signal(SIGUSR1));
  // Both processes of the group report it (in either order).
  std::string seen = p.read_stdout_until("got 10") + p.read_stdout_until("got 10");
  EXPECT_NE(seen.find("main got 10"), std::string::npos) << seen;
  EXPECT_NE(seen.find("member got 10"), std::string::npos) << seen;
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_EQ(p.wait(), 0) << p.err();
}

TEST(InitSignals, WithoutDashGOnlyTheChildGetsForwardedSignals) {
  Process p;
  ASSERT_TRUE(p.start(cmd({}, {"group-wait-signals"}), {}));
  ASSERT_NE(p.read_stdout_until("ready main"), "");  // printed after the member is ready
  ASSERT_TRUE(p.signal(SIGUSR1));
  ASSERT_NE(p.read_stdout_until("main got 10"), "");
  ASSERT_TRUE(p.signal(SIGTERM));  // the shutdown reaches the member too
  EXPECT_EQ(p.wait(), 0) << p.err();
  EXPECT_NE(p.out().find("member got 15"), std::string::npos) << p.out();
  EXPECT_EQ(p.out().find("member got 10"), std::string::npos) << p.out();
}

TEST(InitSignals, EnvironmentKillProcessGroup) {
  for (const char* name : {"TINI_KILL_PROCESS_GROUP=1", "GPUREAP_INIT_KILL_PROCESS_GROUP=1"}) {
    Process p;
    ASSERT_TRUE(p.start(cmd({}, {"group-wait-signals"}), with_env({name})));
    ASSERT_NE(p.read_stdout_until("ready main"), "");
    ASSERT_TRUE(p.signal(SIGUSR2));
    std::string seen = p.read_stdout_until("got 12") + p.read_stdout_until("got 12");
    EXPECT_NE(seen.find("member got 12"), std::string::npos) << name << ": " << seen;
    ASSERT_TRUE(p.signal(SIGTERM));
    EXPECT_EQ(p.wait(), 0);
  }
}

// SigIgn of this test process, as /proc/self/status shows it.
unsigned long long inherited_ignored_mask() {
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  unsigned long long mask = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "SigIgn:", 7) == 0) mask = std::strtoull(line + 7, nullptr, 16);
  }
  std::fclose(f);
  return mask;
}

TEST(InitSignals, BlockedAndIgnoredSignalsPreservedIntoChild) {
  SpawnOptions masks;
  masks.block = {SIGUSR1};
  masks.ignore = {SIGUSR2};
  Process p;
  ASSERT_TRUE(p.start(cmd({}, {"sigstate"}), masks));
  EXPECT_EQ(p.wait(), 0) << p.err();
  // SigBlk/SigIgn are hex masks with bit (sig-1): USR1 (10) -> 0x200, USR2 (12) -> 0x800.
  std::string blk = p.read_stdout_until("SigBlk:");
  std::string ign = p.read_stdout_until("SigIgn:");
  unsigned long long blocked = std::stoull(blk.substr(blk.find(':') + 1), nullptr, 16);
  unsigned long long ignored = std::stoull(ign.substr(ign.find(':') + 1), nullptr, 16);
  EXPECT_EQ(blocked, 1ULL << (SIGUSR1 - 1)) << blk;
  // The spawn resets signals 1-31 to their defaults; real-time signals keep
  // what this test process inherited (a CI runner may ignore some). On top of
  // that only USR2 — in particular the init's own SIGTTIN/SIGTTOU must not be
  // left ignored.
  const unsigned long long classic_bits = (1ULL << 31) - 1;  // bit (sig-1) for signals 1-31
  const unsigned long long expected = (inherited_ignored_mask() & ~classic_bits) | (1ULL << (SIGUSR2 - 1));
  EXPECT_EQ(ignored, expected) << ign;
}

TEST(InitSignals, ParentDeathSignal) {
  // Our test process adopts the init when the intermediate parent dies.
  ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1UL), 0);
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  pid_t parent = ::fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {
    // The intermediate parent: start the init, wait until it runs its child, die.
    Process* p = new Process;  // leaked on purpose: this process _exits
    if (!p->start(cmd({"-p", "SIGTERM"}, {"wait-signals"}), {})) ::_exit(1);
    std::string ready = p->read_stdout_until("ready main");
    std::string line = std::to_string(p->pid()) + "\n" + p->out();
    if (ready.empty() || ::write(out[1], line.data(), line.size()) < 0) ::_exit(2);
    ::_exit(0);  // no cleanup: the init must notice our death
  }
  ::close(out[1]);
  int status = 0;
  ASSERT_EQ(::waitpid(parent, &status, 0), parent);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  char buf[256] = {};
  ASSERT_GT(::read(out[0], buf, sizeof buf - 1), 0);
  ::close(out[0]);
  pid_t init_pid = static_cast<pid_t>(std::atoi(buf));
  int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, init_pid, 0U));
  ASSERT_GE(pidfd, 0);
  struct Guard {  // kills the orphaned init if an assertion below fails
    int fd;
    pid_t pid;
    bool done = false;
    ~Guard() {
      if (!done) {
        ::syscall(SYS_pidfd_send_signal, fd, SIGKILL, nullptr, 0U);
        ::waitpid(pid, nullptr, 0);
      }
      ::close(fd);
    }
  } guard{pidfd, init_pid};
  pollfd pfd{pidfd, POLLIN, 0};
  ASSERT_EQ(::poll(&pfd, 1, 10000), 1) << "init did not exit after its parent died";
  ASSERT_EQ(::waitpid(init_pid, &status, 0), init_pid);
  guard.done = true;
  // SIGTERM (the parent-death signal) was forwarded; the helper exits 0 on TERM.
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST(InitTty, CtrlCOnTheTerminalGives130) {
  Process p;
  ASSERT_TRUE(p.start(cmd({}, {"tty"}), on_tty()));
  std::string info = p.read_stdout_until("pgrp");
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  // As tini: the child leads its own process group, which owns the terminal.
  std::vector<int> pid = numbers_after(info, "pid ");
  std::vector<int> pgrp = numbers_after(info, "pgrp ");
  std::vector<int> fg = numbers_after(info, "fg ");
  ASSERT_EQ(pid.size(), 1u);
  EXPECT_EQ(pgrp, pid) << info;
  EXPECT_EQ(fg, pid) << info;
  ASSERT_TRUE(p.write_tty("\x03"));
  EXPECT_EQ(p.wait(), 130) << p.out();
}

// ---- reaping ----

TEST(InitReap, ReapsAGrandchildsHundredChildren) {
  Process p;
  ASSERT_TRUE(p.start(cmd({"-w"}, {"zombies", "100"}), {}));
  EXPECT_EQ(p.wait(), 0) << p.err();
  std::vector<int> zombies = numbers_after(p.out(), "zombie ");
  std::vector<int> reaped = numbers_after(p.err(), "Reaped zombie process with pid=");
  ASSERT_EQ(zombies.size(), 100u) << p.out();
  std::set<int> reaped_set(reaped.begin(), reaped.end());
  for (int z : zombies) EXPECT_TRUE(reaped_set.count(z) == 1) << "zombie " << z << " not reaped by the init";
}

TEST(InitReap, DoubleForkLeavesNoZombie) {
  Process p;
  ASSERT_TRUE(p.start(cmd({"-w"}, {"double-fork"}), {}));
  EXPECT_EQ(p.wait(), 0) << p.err();
  std::vector<int> grandchild = numbers_after(p.out(), "grandchild ");
  ASSERT_EQ(grandchild.size(), 1u) << p.out();
  EXPECT_EQ(numbers_after(p.err(), "Reaped zombie process with pid="), grandchild) << p.err();
}

TEST(InitReap, NotPid1WarnsAndStillReapsAsSubreaper) {
  Process p;  // a stub is PID 1 of the namespace; the init is PID 2
  ASSERT_TRUE(p.start({kHelper, "pid1-stub", kInit, "-w", "--", kHelper, "zombies", "20"}, {}));
  EXPECT_EQ(p.wait(), 0) << p.err();
  EXPECT_NE(p.err().find("not running as PID 1"), std::string::npos) << p.err();
  EXPECT_EQ(numbers_after(p.err(), "Reaped zombie process with pid=").size(), 20u) << p.err();
}

TEST(InitReap, SubreaperFlagOrEnvironmentSilencesTheWarning) {
  for (const char* env : {"", "TINI_SUBREAPER=", "GPUREAP_INIT_SUBREAPER=1"}) {
    Process p;
    std::vector<std::string> argv{kHelper, "pid1-stub", kInit, "-w"};
    if (*env == '\0') argv.push_back("-s");
    for (const char* a : {"--", GPUREAP_INIT_HELPER_BIN, "zombies", "20"}) argv.emplace_back(a);
    SpawnOptions opt;
    if (*env != '\0') opt.env.push_back(env);
    ASSERT_TRUE(p.start(argv, opt));
    EXPECT_EQ(p.wait(), 0) << p.err();
    EXPECT_EQ(p.err().find("not running as PID 1"), std::string::npos) << env << p.err();
    EXPECT_EQ(numbers_after(p.err(), "Reaped zombie process with pid=").size(), 20u) << env << p.err();
  }
}

// ---- shutdown escalation (new behaviour) ----

TEST(InitShutdown, TermIgnoringChildIsKilledAtTheDeadline) {
  Process p;
  ASSERT_TRUE(p.start(cmd({"--grace", "0.5", "--gpu-grace", "0.2"}, {"ignore-term"}), {}));
  std::string ready = p.read_stdout_until("ready main");
  ASSERT_NE(ready, "");
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_EQ(p.wait(), 137) << p.err();  // tini would wait forever
  EXPECT_GE(elapsed_s(t0), 0.5);
  std::vector<Escalation> esc = escalations(p.err());
  ASSERT_EQ(esc.size(), 1u) << p.err();
  EXPECT_EQ(esc[0].pid, numbers_after(ready, "ready main ").at(0));
  EXPECT_GE(esc[0].after, 0.5);
  EXPECT_LT(esc[0].after, 1.5);
  EXPECT_FALSE(esc[0].gpu);
}

void expect_grandchild_killed_at_grace(const SpawnOptions& opt, bool new_session) {
  Process p;
  std::vector<std::string> helper{"tree-ignore-term"};
  if (new_session) helper.push_back("setsid");
  ASSERT_TRUE(p.start(cmd({"--grace", "1", "--gpu-grace", "0.2"}, helper), opt));
  std::string gc = p.read_stdout_until("grandchild ");
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_EQ(p.wait(), 143) << p.err();  // the main child died of the TERM
  EXPECT_GE(elapsed_s(t0), 1.0);
  std::vector<Escalation> esc = escalations(p.err());
  ASSERT_EQ(esc.size(), 1u) << p.err();
  EXPECT_EQ(esc[0].pid, numbers_after(gc, "grandchild ").at(0)) << p.err();
  // Deadlines count from the shutdown signal; the rest of the tree gets its TERM up to 20 ms after the main child.
  EXPECT_GE(esc[0].after, 0.97);
  EXPECT_LT(esc[0].after, 1.9);
  EXPECT_FALSE(esc[0].gpu);
}

TEST(InitShutdown, TermIgnoringGrandchildIsKilledAtTheDeadline) { expect_grandchild_killed_at_grace({}, false); }

TEST(InitShutdown, SetsidEscapedTermIgnorerIsKilledToo) { expect_grandchild_killed_at_grace({}, true); }

TEST(InitShutdown, WorksWithTheHostsProcMounted) {  // /proc of an ancestor namespace: NSpid translation
  expect_grandchild_killed_at_grace(host_proc(), true);
}

TEST(InitShutdown, SetsidEscapedDescendantGetsTerm) {
  Process p;
  ASSERT_TRUE(p.start(cmd({"--grace", "10"}, {"escaped-wait-signals"}), {}));
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_EQ(p.wait(), 143) << p.err();
  EXPECT_NE(p.out().find("escaped got 15"), std::string::npos) << p.out();
  EXPECT_TRUE(escalations(p.err()).empty()) << p.err();
  EXPECT_LT(elapsed_s(t0), 5.0);  // nobody waited for the 10 s grace
}

TEST(InitShutdown, StoppedDescendantIsContinuedToActOnTerm) {
  Process p;
  ASSERT_TRUE(p.start(cmd({"--grace", "10"}, {"stopped-child"}), {}));
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_NE(p.read_stdout_until("stopped got 15"), "") << p.out();
  EXPECT_EQ(p.wait(), 143) << p.err();
  EXPECT_TRUE(escalations(p.err()).empty()) << p.err();
  EXPECT_LT(elapsed_s(t0), 5.0);
}

TEST(InitShutdown, GpuHolderIsKilledAtGpuGraceOthersKeepGrace) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string device = dir.path + "/nvidia0";
  std::ofstream(device) << "simulated GPU\n";
  Process p;
  ASSERT_TRUE(p.start(cmd({"--grace", "1", "--gpu-grace", "0.2", "--gpu-device-prefix", dir.path + "/"},
                          {"gpu-and-plain", device}),
                      {}));
  std::string gpu = p.read_stdout_until("gpu ");
  std::string plain = p.read_stdout_until("plain ");
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_EQ(p.wait(), 143) << p.err();
  std::vector<Escalation> esc = escalations(p.err());
  ASSERT_EQ(esc.size(), 2u) << p.err();
  int gpu_pid = numbers_after(gpu, "gpu ").at(0);
  int plain_pid = numbers_after(plain, "plain ").at(0);
  for (const Escalation& e : esc) {
    if (e.pid == gpu_pid) {
      EXPECT_TRUE(e.gpu);
      EXPECT_GE(e.after, 0.17);  // TERM up to 20 ms after the shutdown signal, deadline counted from it
      EXPECT_LT(e.after, 0.9);
    } else {
      EXPECT_EQ(e.pid, plain_pid);
      EXPECT_FALSE(e.gpu);
      EXPECT_GE(e.after, 0.97);
      EXPECT_LT(e.after, 1.9);
    }
  }
}

TEST(InitShutdown, GpuPrefixFromTheEnvironment) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  std::string device = dir.path + "/nvidia0";
  std::ofstream(device) << "simulated GPU\n";
  Process p;
  ASSERT_TRUE(p.start(cmd({}, {"gpu-and-plain", device}),
                      with_env({"GPUREAP_INIT_GPU_DEVICE_PREFIX=" + dir.path + "/", "GPUREAP_INIT_GRACE=0.6",
                                "GPUREAP_INIT_GPU_GRACE=0.1"})));
  ASSERT_NE(p.read_stdout_until("ready main"), "");
  ASSERT_TRUE(p.signal(SIGTERM));
  EXPECT_EQ(p.wait(), 143) << p.err();
  std::vector<Escalation> esc = escalations(p.err());
  ASSERT_EQ(esc.size(), 2u) << p.err();
  EXPECT_EQ(std::count_if(esc.begin(), esc.end(), [](const Escalation& e) { return e.gpu && e.after < 0.5; }), 1);
}

TEST(InitShutdown, LeftoversAfterTheMainChildExitsGetTermThenKill) {
  Process p;
  ASSERT_TRUE(p.start(cmd({"--grace", "0.5"}, {"orphan-ignore-term", "7"}), {}));
  EXPECT_EQ(p.wait(), 7) << p.err();  // the main child's own code
  std::vector<Escalation> esc = escalations(p.err());
  ASSERT_EQ(esc.size(), 1u) << p.err();
  EXPECT_EQ(esc[0].pid, numbers_after(p.out(), "orphan ").at(0));
  EXPECT_GE(esc[0].after, 0.47);
}

}  // namespace
}  // namespace gpureap::init_test
