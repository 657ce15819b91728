// open_verified_pidfd against real children: a match yields a usable pidfd; a
// different start time (PID reuse), an exited process or a gone pid do not.
#include "proc/identity.hpp"

#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>

#include <climits>

#include "child.hpp"
#include "proc/scan.hpp"
#include "sys/pidfd.hpp"

namespace gpureap::proc {
namespace {

using test::Child;
using test::Pipes;
using test::spawn_ready;

sys::HostRoot slash() {
  auto r = sys::HostRoot::open("/");
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

TEST(OpenVerifiedPidfd, MatchingStartTimeGivesWorkingPidfd) {
  Pipes pipes;
  Child child = spawn_ready(pipes, [] {});
  ASSERT_TRUE(child.started());
  auto root = slash();
  auto p = read_process(root, child.pid(), ScanOptions{});
  ASSERT_TRUE(p.ok());
  auto fd = open_verified_pidfd(root, child.pid(), p->start_time);
  ASSERT_TRUE(fd.ok()) << fd.error().message;
  EXPECT_TRUE(fd->valid());
  EXPECT_TRUE(sys::pidfd_send_signal(fd->get(), 0).ok());
}

TEST(OpenVerifiedPidfd, DifferentStartTimeIsPidReuse) {
  Pipes pipes;
  Child child = spawn_ready(pipes, [] {});
  ASSERT_TRUE(child.started());
  auto root = slash();
  auto p = read_process(root, child.pid(), ScanOptions{});
  ASSERT_TRUE(p.ok());
  auto fd = open_verified_pidfd(root, child.pid(), p->start_time + 1);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().code, ESTALE);
  EXPECT_NE(fd.error().message.find("reused"), std::string::npos);
}

TEST(OpenVerifiedPidfd, ZombieIsRefused) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  Child child(pid);
  ASSERT_GT(pid, 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);
  auto root = slash();
  auto p = read_process(root, pid, ScanOptions{});
  ASSERT_TRUE(p.ok());
  auto fd = open_verified_pidfd(root, pid, p->start_time);
  ASSERT_FALSE(fd.ok());
  EXPECT_EQ(fd.error().code, ESRCH);
}

TEST(OpenVerifiedPidfd, GonePidIsVanished) {
  auto fd = open_verified_pidfd(slash(), INT_MAX - 1, 1);
  ASSERT_FALSE(fd.ok());
  EXPECT_TRUE(fd.error().vanished()) << fd.error().message;
  EXPECT_FALSE(open_verified_pidfd(slash(), 0, 1).ok());
  EXPECT_FALSE(open_verified_pidfd(slash(), -5, 1).ok());
}

}  // namespace
}  // namespace gpureap::proc
