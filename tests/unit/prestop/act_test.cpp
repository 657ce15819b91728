// The action step on processes this test forks itself (and only those): a pid
// whose start time no longer matches is never signalled; a TERM handler exits
// without a KILL; a TERM-ignoring process is killed when the TERM wait ends;
// memory release is waited for through the driver's listing.
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "prestop/act.hpp"
#include "prestop/self.hpp"
#include "proc/scan.hpp"
#include "sys/host_root.hpp"
#include "sys/pidfd.hpp"

namespace {

using gpureap::prestop::ActOptions;
using gpureap::prestop::Clock;
using gpureap::prestop::Outcome;
using gpureap::prestop::Target;
using std::chrono::milliseconds;

enum class OnTerm { dies, ignores, blocks };

// A child of this test that pauses; ready once it has set its TERM disposition.
// Destruction SIGKILLs it (through a pidfd) and reaps it, also on a failed assertion.
class Forked {
 public:
  explicit Forked(OnTerm mode) {
    int p[2];
    if (::pipe(p) != 0) return;
    pid_ = ::fork();
    if (pid_ == 0) {
      ::close(p[0]);
      sigset_t term;
      sigemptyset(&term);
      sigaddset(&term, SIGTERM);
      if (mode == OnTerm::ignores) ::signal(SIGTERM, SIG_IGN);
      if (mode == OnTerm::blocks) ::sigprocmask(SIG_BLOCK, &term, nullptr);
      const char ok = 'r';
      if (::write(p[1], &ok, 1) != 1) ::_exit(3);
      for (;;) ::pause();
    }
    ::close(p[1]);
    char c = 0;
    if (pid_ < 0 || ::read(p[0], &c, 1) != 1) pid_ = -1;
    ::close(p[0]);
    if (pid_ > 0) {
      auto fd = gpureap::sys::pidfd_open(pid_);
      if (fd) pidfd_ = std::move(fd.value());
    }
  }
  Forked(const Forked&) = delete;
  Forked& operator=(const Forked&) = delete;
  ~Forked() {
    if (pid_ <= 0 || reaped_) return;
    if (pidfd_) (void)gpureap::sys::pidfd_send_signal(pidfd_.get(), SIGKILL);
    ::waitpid(pid_, nullptr, 0);
  }
  [[nodiscard]] pid_t pid() const { return pid_; }
  [[nodiscard]] bool running() const {
    pollfd p{pidfd_.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 0;
  }
  // Reaps it (it must have exited) and returns the raw wait status.
  int reap() {
    int status = 0;
    ::waitpid(pid_, &status, 0);
    reaped_ = true;
    return status;
  }

 private:
  pid_t pid_ = -1;
  gpureap::sys::UniqueFd pidfd_;
  bool reaped_ = false;
};

class PrestopAct : public ::testing::Test {
 protected:
  void SetUp() override {
    auto r = gpureap::sys::HostRoot::open("/");
    ASSERT_TRUE(r.ok());
    root_.emplace(std::move(r.value()));
  }

  Target target_of(const Forked& f) {
    auto p = gpureap::proc::read_process(*root_, f.pid(), gpureap::proc::ScanOptions{});
    EXPECT_TRUE(p.ok());
    Target t;
    t.pid = f.pid();
    t.start_time = p ? p->start_time : 0;
    t.comm = p ? p->comm : "";
    t.gpu_fds = 1;
    return t;
  }

  static ActOptions options(int deadline_ms, int term_wait_ms) {
    ActOptions o;
    o.start = Clock::now();
    o.deadline = milliseconds(deadline_ms);
    o.term_wait = milliseconds(term_wait_ms);
    o.release_poll = milliseconds(5);
    return o;
  }

  static gpureap::prestop::ListedPids nothing_listed() {
    return [] { return std::optional<std::vector<std::uint32_t>>(std::vector<std::uint32_t>{}); };
  }

  std::optional<gpureap::sys::HostRoot> root_;
  std::vector<std::string> lines_;
  gpureap::prestop::LogSink sink() {
    return [this](const std::string& l) { lines_.push_back(l); };
  }
};

// "SigPnd:\t..." / "ShdPnd:\t..." hex masks: is signal `sig` pending?
bool pending_in_status(pid_t pid, int sig) {
  auto text = gpureap::sys::HostRoot::open("/")->read_file("proc/" + std::to_string(pid) + "/status");
  if (!text) return false;
  for (const char* key : {"\nSigPnd:\t", "\nShdPnd:\t"}) {
    auto at = text->find(key);
    if (at == std::string::npos) continue;
    const auto mask = std::stoull(text->substr(at + 9, 16), nullptr, 16);
    if ((mask >> (sig - 1)) & 1ULL) return true;
  }
  return false;
}

TEST_F(PrestopAct, PidReusedBetweenScanAndSignalIsNotHit) {
  // The live process at this pid blocks SIGTERM, so a TERM sent to it would
  // stay visible as pending; the target carries another start time, as a
  // record of an earlier process with the same pid would.
  Forked live(OnTerm::blocks);
  ASSERT_GT(live.pid(), 0);
  Target stale = target_of(live);
  stale.start_time += 1;
  auto rep = gpureap::prestop::act(*root_, {stale}, nothing_listed(), options(500, 250), sink());
  ASSERT_EQ(rep.results.size(), 1U);
  EXPECT_EQ(rep.results[0].outcome, Outcome::pid_reused);
  EXPECT_FALSE(rep.results[0].term_sent);
  EXPECT_FALSE(rep.results[0].kill_sent);
  EXPECT_TRUE(live.running());
  EXPECT_FALSE(pending_in_status(live.pid(), SIGTERM));
  EXPECT_TRUE(rep.all_gone());  // what we scanned is gone; the new process is not ours
  ASSERT_EQ(lines_.size(), 1U);
  EXPECT_NE(lines_[0].find("pid reused between scan and signal"), std::string::npos) << lines_[0];
  EXPECT_LT(rep.total_s, 0.25);  // nothing to wait for
}

TEST_F(PrestopAct, ProcessThatExitsOnTermIsNotKilled) {
  Forked f(OnTerm::dies);
  ASSERT_GT(f.pid(), 0);
  auto rep = gpureap::prestop::act(*root_, {target_of(f)}, nothing_listed(), options(2000, 1000), sink());
  ASSERT_EQ(rep.results.size(), 1U);
  const auto& r = rep.results[0];
  EXPECT_EQ(r.outcome, Outcome::exited);
  EXPECT_TRUE(r.term_sent);
  EXPECT_FALSE(r.kill_sent);
  ASSERT_TRUE(r.exit_after_s);
  EXPECT_LT(*r.exit_after_s, 1.0);
  EXPECT_EQ(r.memory_released, std::optional<bool>(true));
  EXPECT_TRUE(rep.all_gone());
  const int status = f.reap();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_LT(rep.total_s, 1.0);
}

TEST_F(PrestopAct, TermIgnoringProcessIsKilledWhenTheTermWaitEnds) {
  Forked f(OnTerm::ignores);
  ASSERT_GT(f.pid(), 0);
  auto rep = gpureap::prestop::act(*root_, {target_of(f)}, nothing_listed(), options(1000, 300), sink());
  const auto& r = rep.results.at(0);
  EXPECT_EQ(r.outcome, Outcome::killed);
  EXPECT_TRUE(r.kill_sent);
  ASSERT_TRUE(r.kill_after_s && r.exit_after_s);
  EXPECT_GE(*r.kill_after_s, 0.3);
  EXPECT_GE(*r.exit_after_s, *r.kill_after_s);
  EXPECT_LT(rep.total_s, 1.0);
  EXPECT_TRUE(rep.all_gone());
  const int status = f.reap();
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);
  ASSERT_EQ(lines_.size(), 1U);
  EXPECT_NE(lines_[0].find("SIGTERM ignored for"), std::string::npos) << lines_[0];
}

TEST_F(PrestopAct, WaitsForTheDriverToDropTheMemory) {
  Forked f(OnTerm::dies);
  ASSERT_GT(f.pid(), 0);
  Target t = target_of(f);
  t.driver_pids = {static_cast<std::uint32_t>(f.pid())};
  int reads = 0;
  // The driver keeps listing it for three reads after the exit, then not.
  gpureap::prestop::ListedPids listed = [&]() -> std::optional<std::vector<std::uint32_t>> {
    if (++reads <= 3) return std::vector<std::uint32_t>{t.driver_pids[0]};
    return std::vector<std::uint32_t>{};
  };
  auto rep = gpureap::prestop::act(*root_, {t}, listed, options(2000, 1000), sink());
  const auto& r = rep.results.at(0);
  EXPECT_EQ(r.outcome, Outcome::exited);
  EXPECT_EQ(reads, 4);
  ASSERT_TRUE(r.exit_after_s && r.release_after_s);
  EXPECT_GE(*r.release_after_s, *r.exit_after_s);
  EXPECT_EQ(r.memory_released, std::optional<bool>(true));
  EXPECT_TRUE(rep.all_gone());
}

TEST_F(PrestopAct, MemoryStillListedAtTheDeadlineIsAFailure) {
  Forked f(OnTerm::dies);
  ASSERT_GT(f.pid(), 0);
  Target t = target_of(f);
  t.driver_pids = {static_cast<std::uint32_t>(f.pid())};
  gpureap::prestop::ListedPids listed = [&]() -> std::optional<std::vector<std::uint32_t>> {
    return std::vector<std::uint32_t>{t.driver_pids[0]};
  };
  auto rep = gpureap::prestop::act(*root_, {t}, listed, options(300, 150), sink());
  const auto& r = rep.results.at(0);
  EXPECT_EQ(r.outcome, Outcome::exited);
  EXPECT_EQ(r.memory_released, std::optional<bool>(false));
  EXPECT_FALSE(rep.all_gone());
  EXPECT_GE(rep.total_s, 0.3);
  EXPECT_LT(rep.total_s, 1.0);
}

TEST_F(PrestopAct, DryRunSignalsNothing) {
  Forked f(OnTerm::blocks);
  ASSERT_GT(f.pid(), 0);
  auto o = options(500, 250);
  o.dry_run = true;
  auto rep = gpureap::prestop::act(*root_, {target_of(f)}, nothing_listed(), o, sink());
  EXPECT_EQ(rep.results.at(0).outcome, Outcome::dry_run);
  EXPECT_TRUE(f.running());
  EXPECT_FALSE(pending_in_status(f.pid(), SIGTERM));
}

TEST_F(PrestopAct, ATargetAlreadyGoneIsNoFailure) {
  Forked f(OnTerm::dies);
  ASSERT_GT(f.pid(), 0);
  Target t = target_of(f);
  ASSERT_EQ(::kill(f.pid(), SIGKILL), 0);  // our own child
  f.reap();
  auto rep = gpureap::prestop::act(*root_, {t}, nothing_listed(), options(500, 250), sink());
  EXPECT_EQ(rep.results.at(0).outcome, Outcome::gone);
  EXPECT_TRUE(rep.all_gone());
}

TEST(PrestopSelfIdentity, ReadsOurOwnPidAndNamespace) {
  auto root = gpureap::sys::HostRoot::open("/");
  ASSERT_TRUE(root.ok());
  auto self = gpureap::prestop::read_self_identity(*root);
  ASSERT_TRUE(self.ok()) << self.error().message;
  EXPECT_EQ(self->pid, ::getpid());
  EXPECT_EQ(gpureap::prestop::read_pid_namespace(*root, ::getpid()), self->pid_namespace);
}

}  // namespace
