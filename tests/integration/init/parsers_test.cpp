// The pure parsers of gpureap-init, on real /proc lines and on option text.
#include <gtest/gtest.h>

#include "init/options.hpp"
#include "init/proc_tree.hpp"

namespace gpureap::init {
namespace {

TEST(InitParsers, StatLineWithAwkwardComm) {
  // Captured from a process renamed with prctl(PR_SET_NAME, "a) (b c").
  const char* line =
      "4242 (a) (b c) S 4200 4242 4200 0 -1 4194560 120 0 0 0 1 2 0 0 20 0 1 0 987654 8000000 300 "
      "18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n";
  ProcEntry e;
  ASSERT_TRUE(parse_stat_line(line, e));
  EXPECT_EQ(e.pid, 4242);
  EXPECT_STREQ(e.comm, "a)?(b?c");  // spaces and control characters are masked for the log
  EXPECT_EQ(e.state, 'S');
  EXPECT_EQ(e.ppid, 4200);
  EXPECT_EQ(e.pgrp, 4242);
  EXPECT_EQ(e.start, 987654u);
}

TEST(InitParsers, StatLineCommCannotForgeALogLine) {
  ProcEntry e;
  ASSERT_TRUE(parse_stat_line("9 (x\n[WARN) R 1 9 9 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 77 0 0", e));
  EXPECT_STREQ(e.comm, "x?[WARN");
  EXPECT_EQ(e.start, 77u);
}

TEST(InitParsers, StatLineZombieAndTruncated) {
  ProcEntry e;
  ASSERT_TRUE(parse_stat_line("17 (sh) Z 1 17 17 0 -1 4227084 0 0 0 0 0 0 0 0 20 0 1 0 5555 0 0", e));
  EXPECT_EQ(e.state, 'Z');
  EXPECT_EQ(e.start, 5555u);
  EXPECT_FALSE(parse_stat_line("17 (sh) Z 1 17", e));  // half-written
  EXPECT_FALSE(parse_stat_line("17 sh S 1", e));
  EXPECT_FALSE(parse_stat_line("", e));
}

TEST(InitParsers, NSpidLine) {
  const char* status = "Name:\tsleep\nTgid:\t595\nNSpid:\t595\t1\nNSpgid:\t595\t1\n";
  int count = 0;
  EXPECT_EQ(parse_nspid(status, 0, &count), 595);
  EXPECT_EQ(count, 2);
  EXPECT_EQ(parse_nspid(status, 1, nullptr), 1);
  EXPECT_EQ(parse_nspid(status, 2, nullptr), 0);
  EXPECT_EQ(parse_nspid("Name:\tx\nPid:\t3\n", 0, &count), 0);
  EXPECT_EQ(count, 0);
}

TEST(InitParsers, Durations) {
  int64_t ns = 0;
  ASSERT_TRUE(parse_duration("20", ns));
  EXPECT_EQ(ns, 20'000'000'000);
  ASSERT_TRUE(parse_duration("0.2", ns));
  EXPECT_EQ(ns, 200'000'000);
  ASSERT_TRUE(parse_duration("1.5s", ns));
  EXPECT_EQ(ns, 1'500'000'000);
  ASSERT_TRUE(parse_duration("250ms", ns));
  EXPECT_EQ(ns, 250'000'000);
  ASSERT_TRUE(parse_duration(".5", ns));
  EXPECT_EQ(ns, 500'000'000);
  ASSERT_TRUE(parse_duration("0", ns));
  EXPECT_EQ(ns, 0);
  for (const char* bad : {"", "-1", "soon", "1m", "1.2.3", "s", "9999999999"}) {
    EXPECT_FALSE(parse_duration(bad, ns)) << bad;
  }
}

TEST(InitParsers, Signals) {
  EXPECT_EQ(parse_signal("SIGKILL"), 9);
  EXPECT_EQ(parse_signal("TERM"), 15);
  EXPECT_EQ(parse_signal("15"), 15);
  EXPECT_EQ(parse_signal("SIGUSR2"), 12);
  EXPECT_EQ(parse_signal("SIGFOO"), 0);
  EXPECT_EQ(parse_signal("0"), 0);
  EXPECT_EQ(parse_signal("32"), 0);
}

}  // namespace
}  // namespace gpureap::init
