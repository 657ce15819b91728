// Parsers on lines captured from this machine's /proc (tests/fixtures/proc,
// see its README), plus negatives: truncation, empty input, garbage, overflow.
#include "proc/parse.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "fixtures.hpp"

namespace gpureap::proc {
namespace {

using test::fixture;

// ---------------------------------------------------------------- loadavg

TEST(ParseLoadavg, TheKernelsCountOfTasks) {
  const std::string captured = fixture("loadavg");
  const auto slash = captured.find('/');
  ASSERT_NE(slash, std::string::npos);
  const auto want = static_cast<unsigned>(std::stoul(captured.substr(slash + 1)));
  EXPECT_EQ(parse_loadavg_tasks(captured), want);
  EXPECT_EQ(parse_loadavg_tasks("0.20 0.18 0.12 1/80 11206\n"), 80U);
  EXPECT_EQ(parse_loadavg_tasks("0.20 0.18 0.12 1/80 11206"), 80U);  // no newline
}

TEST(ParseLoadavg, AnythingElseIsNullopt) {
  for (const char* bad :
       {"", "\n", "0.20 0.18 0.12 1/80", "0.20 0.18 0.12 180 11206\n", "0.20 0.18 0.12 1/ 11206\n",
        "0.20 0.18 0.12 /80 11206\n", "0.20 0.18 0.12 1/-80 11206\n",
        "0.20 0.18 0.12 1/80x 11206\n", "0.20 0.18 0.12 1/80 11206 extra\n",
        "0.20 0.18 0.12 1/99999999999 11206\n"}) {
    EXPECT_EQ(parse_loadavg_tasks(bad), std::nullopt) << bad;
  }
}

// ---------------------------------------------------------------- status

TEST(ParseStatus, NormalProcess) {
  auto s = parse_status(fixture("normal.status"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name, "sleep");
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->tgid, 4702);
  EXPECT_EQ(s->ppid, 4695);
  EXPECT_EQ(s->uid, 0u);
  EXPECT_EQ(s->nspid, (std::vector<pid_t>{4702}));
  EXPECT_EQ(s->threads, 1U);
}

TEST(ParseStatus, KernelThread) {
  auto s = parse_status(fixture("kthread.status"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name, "kthreadd");
  EXPECT_EQ(s->tgid, 2);
  EXPECT_EQ(s->ppid, 0);
  EXPECT_EQ(s->nspid, (std::vector<pid_t>{2}));
}

TEST(ParseStatus, PidNamespaceHasHostAndLocalPid) {
  auto s = parse_status(fixture("nspid.status"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->nspid, (std::vector<pid_t>{4599, 1}));
  EXPECT_EQ(s->tgid, 4599);  // Tgid is in the reader's namespace (the host's)
}

TEST(ParseStatus, Zombie) {
  auto s = parse_status(fixture("zombie.status"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, 'Z');
  EXPECT_EQ(s->tgid, 4790);
  EXPECT_EQ(s->ppid, 4786);
}

TEST(ParseStatus, NameWithSpaceAndParen) {
  auto s = parse_status(fixture("paren_comm.status"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name, "a) b");
}

TEST(ParseStatus, NameEscapesUndone) {
  auto s = parse_status("Name:\ta\\nb\\\\c\nTgid:\t7\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->name, "a\nb\\c");
}

TEST(ParseStatus, EmptyAndGarbageAreNullopt) {
  EXPECT_FALSE(parse_status(""));
  EXPECT_FALSE(parse_status("\n\n"));
  EXPECT_FALSE(parse_status("hello world\nno colons here\n"));
  EXPECT_FALSE(parse_status(std::string("\0\0\0\n", 4)));
}

TEST(ParseStatus, CutMidLineDropsTheCutLine) {
  // "NSpid:\t4599\t1" cut after "45": the partial id must not be reported.
  std::string full = fixture("nspid.status");
  std::size_t at = full.find("NSpid:\t4599") + 9;
  auto s = parse_status(std::string_view(full).substr(0, at));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->tgid, 4599);
  EXPECT_EQ(s->uid, 0u);
  EXPECT_TRUE(s->nspid.empty());
}

TEST(ParseStatus, CutBeforeUidKeepsEarlierFields) {
  std::string full = fixture("normal.status");
  auto s = parse_status(std::string_view(full).substr(0, full.find("Uid:")));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->tgid, 4702);
  EXPECT_FALSE(s->uid);
  EXPECT_TRUE(s->nspid.empty());
}

TEST(ParseStatus, MissingFieldsStayAbsent) {
  auto s = parse_status("Name:\tx\nState:\tR (running)\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, 'R');
  EXPECT_FALSE(s->tgid);
  EXPECT_FALSE(s->ppid);
  EXPECT_FALSE(s->uid);
}

TEST(ParseStatus, HugeAndNegativeNumbersAreAbsent) {
  auto s = parse_status("Tgid:\t99999999999999999999\nPPid:\t-1\nUid:\t4294967296\t0\t0\t0\nNSpid:\t5\t99999999999\n");
  EXPECT_FALSE(s);
  auto t = parse_status("Tgid:\t2147483647\nUid:\t4294967295\t0\t0\t0\n");
  ASSERT_TRUE(t);
  EXPECT_EQ(t->tgid, 2147483647);
  EXPECT_EQ(t->uid, 4294967295u);
}

TEST(ParseStatus, BadNspidEntryDropsTheList) {
  auto s = parse_status("Tgid:\t5\nNSpid:\t5\tx\n");
  ASSERT_TRUE(s);
  EXPECT_TRUE(s->nspid.empty());
}

// ---------------------------------------------------------------- stat

TEST(ParseStat, NormalProcess) {
  auto s = parse_stat(fixture("normal.stat"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pid, 4702);
  EXPECT_EQ(s->comm, "sleep");
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->ppid, 4695);
  EXPECT_EQ(s->pgrp, 4695);
  EXPECT_EQ(s->session, 2731);
  EXPECT_EQ(s->start_time, 27369u);
  EXPECT_FALSE(s->kernel_thread());
}

TEST(ParseStat, KernelThread) {
  auto s = parse_stat(fixture("kthread.stat"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pid, 2);
  EXPECT_EQ(s->comm, "kthreadd");
  EXPECT_EQ(s->ppid, 0);
  EXPECT_EQ(s->start_time, 22u);
  EXPECT_EQ(s->flags, 2129984u);
  EXPECT_TRUE(s->kernel_thread());
}

TEST(ParseStat, CommWithSpaceAndParenTakesLastParen) {
  auto s = parse_stat(fixture("paren_comm.stat"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pid, 4709);
  EXPECT_EQ(s->comm, "a) b");
  EXPECT_EQ(s->state, 'S');
  EXPECT_EQ(s->ppid, 4695);
  EXPECT_EQ(s->start_time, 27373u);
}

TEST(ParseStat, CommMadeOfParens) {
  auto s = parse_stat("12 ()) () S 1 12 12 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 555 0 0\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->comm, ")) (");
  EXPECT_EQ(s->start_time, 555u);
}

TEST(ParseStat, Zombie) {
  auto s = parse_stat(fixture("zombie.stat"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, 'Z');
  EXPECT_EQ(s->pid, 4790);
  EXPECT_EQ(s->start_time, 119142u);
}

TEST(ParseStat, NamespacedProcess) {
  auto s = parse_stat(fixture("nspid.stat"));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->pid, 4599);  // the reader's namespace, not the local 1
  EXPECT_EQ(s->start_time, 119029u);
}

TEST(ParseStat, TruncatedAnywhereBeforeStartTimeEndIsNullopt) {
  std::string full = fixture("normal.stat");
  std::size_t start_end = full.find(" 27369 ") + 6;  // end of field 22
  for (std::size_t len = 0; len <= start_end; ++len) {
    EXPECT_FALSE(parse_stat(std::string_view(full).substr(0, len))) << "length " << len;
  }
  // Cut after the start time's delimiter: everything we need is whole.
  auto s = parse_stat(std::string_view(full).substr(0, start_end + 1));
  ASSERT_TRUE(s);
  EXPECT_EQ(s->start_time, 27369u);
}

TEST(ParseStat, StartTimeAsLastFieldNeedsNewline) {
  std::string line = "7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123";
  EXPECT_FALSE(parse_stat(line));  // could be "1234..." cut short
  auto s = parse_stat(line + "\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->start_time, 123u);
}

TEST(ParseStat, Garbage) {
  EXPECT_FALSE(parse_stat(""));
  EXPECT_FALSE(parse_stat("\n"));
  EXPECT_FALSE(parse_stat("garbage"));
  EXPECT_FALSE(parse_stat("(x) S 1 2 3\n"));
  EXPECT_FALSE(parse_stat("1 x) S 1 2 3\n"));
  EXPECT_FALSE(parse_stat("1 (x S 1 2 3\n"));
  EXPECT_FALSE(parse_stat(")1 (x S 1 2 3\n"));
  EXPECT_FALSE(parse_stat("0 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123 0\n"));
  EXPECT_FALSE(parse_stat("7 (x) SS 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123 0\n"));
  EXPECT_FALSE(parse_stat("7 (x)  S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123 0\n"));
}

TEST(ParseStat, HugeNumbers) {
  // pid beyond pid_t, ppid beyond pid_t, start time beyond uint64: rejected, not wrapped.
  EXPECT_FALSE(parse_stat("99999999999 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123 0\n"));
  EXPECT_FALSE(parse_stat("7 (x) S 99999999999 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 123 0\n"));
  EXPECT_FALSE(parse_stat("7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551616 0\n"));
  auto s = parse_stat("7 (x) S 1 7 7 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 18446744073709551615 0\n");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->start_time, 18446744073709551615u);
}

// ---------------------------------------------------------------- cgroup

TEST(ParseCgroup, HybridV1) {
  auto c = parse_cgroup(fixture("normal.cgroup"));
  ASSERT_EQ(c.size(), 10u);
  EXPECT_EQ(c[0], (CgroupLine{9, "name=systemd", "/"}));
  EXPECT_EQ(c[5], (CgroupLine{4, "memory", "/process_api/e30ec21447cf53c91bd92ba77df1752c"}));
  EXPECT_EQ(c[9], (CgroupLine{0, "", "/"}));
}

TEST(ParseCgroup, KubernetesV2) {
  auto c = parse_cgroup(fixture("k8s_v2.cgroup"));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].hierarchy_id, 0u);
  EXPECT_EQ(c[0].controllers, "");
  EXPECT_EQ(c[0].path.rfind("/kubepods.slice/", 0), 0u);
}

TEST(ParseCgroup, ColonsInPathSplitOnlyOnFirstTwo) {
  auto c = parse_cgroup(fixture("k8s_misconfigured.cgroup"));
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].controllers, "");
  EXPECT_EQ(c[0].path,
            "/kubepods-burstable-pod0a1b2c3d_4e5f_6789_abcd_ef0123456789.slice:cri-containerd:"
            "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef");
  auto d = parse_cgroup("4:memory:/a:b::c\n");
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], (CgroupLine{4, "memory", "/a:b::c"}));
}

TEST(ParseCgroup, MalformedLinesSkipped) {
  auto c = parse_cgroup(
      "garbage\n"
      "x:memory:/a\n"
      "-1:memory:/a\n"
      "4294967296:memory:/a\n"
      "3:cpu\n"
      "5:pids:\n"
      "\n"
      "1:cpu:/ok\n"
      "0::/cut-mid-li");
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0], (CgroupLine{1, "cpu", "/ok"}));
  EXPECT_TRUE(parse_cgroup("").empty());
}

// ---------------------------------------------------------------- mountinfo

TEST(ParseMountinfo, RealTable) {
  auto m = parse_mountinfo(fixture("normal.mountinfo"));
  ASSERT_EQ(m.size(), 20u);
  EXPECT_EQ(m[0].mount_id, 21u);
  EXPECT_EQ(m[0].parent_id, 26u);
  EXPECT_EQ(m[0].major, 0u);
  EXPECT_EQ(m[0].minor, 20u);
  EXPECT_EQ(m[0].root, "/");
  EXPECT_EQ(m[0].mount_point, "/proc");
  EXPECT_EQ(m[0].fs_type, "proc");
  EXPECT_EQ(m[0].source, "proc");
  EXPECT_EQ(m[0].options, "rw,relatime");
  EXPECT_EQ(m[0].super_options, "rw");
  bool cgroup2 = false;
  for (const auto& e : m) cgroup2 = cgroup2 || (e.fs_type == "cgroup2" && e.mount_point == "/sys/fs/cgroup/unified");
  EXPECT_TRUE(cgroup2);
}

TEST(ParseMountinfo, OctalEscapes) {
  auto m = parse_mountinfo(fixture("escaped.mountinfo"));
  ASSERT_EQ(m.size(), 3u);
  EXPECT_EQ(m[2].mount_point, "/tmp/mnt with space");
  EXPECT_EQ(m[2].fs_type, "tmpfs");
  EXPECT_EQ(m[2].major, 0u);
  EXPECT_EQ(m[2].minor, 40u);
  EXPECT_EQ(m[0].major, 254u);
  EXPECT_EQ(m[0].source, "/dev/vda");
}

TEST(ParseMountinfo, OptionalFieldsBeforeSeparator) {
  auto m = parse_mountinfo("36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue\n");
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].root, "/mnt1");
  EXPECT_EQ(m[0].mount_point, "/mnt2");
  EXPECT_EQ(m[0].fs_type, "ext3");
  EXPECT_EQ(m[0].source, "/dev/root");
  EXPECT_EQ(m[0].super_options, "rw,errors=continue");
}

TEST(ParseMountinfo, MalformedAndCutLinesSkipped) {
  auto m = parse_mountinfo(
      "garbage\n"
      "36 35 98 / /m rw - ext4 /dev/x rw\n"        // no major:minor
      "36 35 98:0 / /m rw ext4 /dev/x rw\n"        // no separator
      "36 35 98:0 / /m rw - ext4\n"                // fields after separator missing
      "x 35 98:0 / /m rw - ext4 /dev/x rw\n"       // bad id
      "36 35 98:0 / /m rw - ext4 /dev/x rw\n"      // ok
      "37 35 98:0 / /cut rw - ext4 /dev/x r");     // no newline
  ASSERT_EQ(m.size(), 1u);
  EXPECT_EQ(m[0].mount_point, "/m");
}

TEST(UnescapeOctal, KeepsBadEscapes) {
  EXPECT_EQ(unescape_octal("a\\040b\\011c\\134d"), "a b\tc\\d");
  EXPECT_EQ(unescape_octal("\\"), "\\");
  EXPECT_EQ(unescape_octal("\\04"), "\\04");
  EXPECT_EQ(unescape_octal("\\089"), "\\089");
  EXPECT_EQ(unescape_octal("\\777"), "\\777");  // > 0xff is not a byte
}

// ---------------------------------------------------------------- cmdline / environ

TEST(ParseCmdline, Real) {
  EXPECT_EQ(parse_cmdline(fixture("normal.cmdline")), (std::vector<std::string>{"sleep", "300"}));
  EXPECT_EQ(parse_cmdline(fixture("paren_comm.cmdline")), (std::vector<std::string>{"/tmp/a) b", "300"}));
  EXPECT_TRUE(parse_cmdline(fixture("kthread.cmdline")).empty());
}

TEST(ParseCmdline, RewrittenArgvWithoutTrailingNul) {
  EXPECT_EQ(parse_cmdline("nginx: worker process"), (std::vector<std::string>{"nginx: worker process"}));
  EXPECT_EQ(parse_cmdline(std::string("a\0\0b", 4)), (std::vector<std::string>{"a", "", "b"}));
}

TEST(ParseCmdline, EmptyArgumentsAndATrailingEmptyOneAreKept) {
  // "a\0\0" is two arguments, the second empty, as the kernel gave them.
  const Argv a = parse_cmdline(std::string("a\0\0", 3));
  EXPECT_EQ(a.size(), 2U);
  EXPECT_EQ(a, (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(parse_cmdline(std::string("\0", 1)), (std::vector<std::string>{""}));
}

TEST(Argv, ReadsAsTheArgumentsItWasGiven) {
  Argv a{"/usr/bin/python3", "", "train.py"};
  EXPECT_EQ(a.size(), 3U);
  EXPECT_FALSE(a.empty());
  EXPECT_EQ(a.front(), "/usr/bin/python3");
  EXPECT_EQ(a.strings(), (std::vector<std::string>{"/usr/bin/python3", "", "train.py"}));
  EXPECT_EQ(a, parse_cmdline(std::string("/usr/bin/python3\0\0train.py\0", 27)));
  EXPECT_NE(a, (std::vector<std::string>{"/usr/bin/python3", "train.py"}));
  EXPECT_NE(a, (std::vector<std::string>{"/usr/bin/python3", "", "train.py", ""}));
  a.push_back("--lr=0.1");
  EXPECT_EQ(a.size(), 4U);
  EXPECT_EQ(std::distance(a.begin(), a.end()), 4);
  a.clear();
  EXPECT_TRUE(a.empty());
  EXPECT_EQ(a.begin(), a.end());
  EXPECT_EQ(a, Argv{});
}

TEST(Argv, TheSameTextAsAnothersIsSharedAndNeverChangedThroughIt) {
  const std::string text("python3\0-m\0torch.distributed.run\0", 33);
  const Argv first = parse_cmdline(text);
  const Argv second = parse_cmdline(text, first);
  EXPECT_EQ(second, first);
  EXPECT_EQ(second.text().data(), first.text().data());  // one text for both
  EXPECT_EQ(second.size(), 3U);
  // Another text, or the same arguments without the last NUL: a text of its own.
  const Argv other = parse_cmdline(std::string("python3\0-m\0torch\0", 17), first);
  EXPECT_NE(other.text().data(), first.text().data());
  EXPECT_EQ(other, (std::vector<std::string>{"python3", "-m", "torch"}));
  const Argv unended = parse_cmdline(text.substr(0, text.size() - 1), first);
  EXPECT_EQ(unended, first);
  EXPECT_NE(unended.text().data(), first.text().data());
  // Nothing shares with an empty argv.
  EXPECT_TRUE(parse_cmdline("", first).empty());
  EXPECT_EQ(parse_cmdline(text, Argv{}).text(), text);
  // A change to one holder is its own: the other still reads the three arguments.
  Argv changed = second;
  changed.push_back("--nproc-per-node=8");
  EXPECT_EQ(changed.size(), 4U);
  EXPECT_EQ(changed.strings().back(), "--nproc-per-node=8");
  EXPECT_EQ(first.strings(), (std::vector<std::string>{"python3", "-m", "torch.distributed.run"}));
  EXPECT_EQ(second, first);
  changed.clear();
  EXPECT_EQ(first.size(), 3U);
  EXPECT_EQ(first.text(), text);
}

TEST(Argv, ACommandLineIsItsArgumentsJoinedOrItsCommInBrackets) {
  Process p;
  p.comm = "kworker/0:1";
  EXPECT_EQ(p.command_line(), "[kworker/0:1]");  // no argv: a kernel thread, a zombie
  p.cmdline = {"python3", "train.py", "--lr=0.1"};
  EXPECT_EQ(p.command_line(), "python3 train.py --lr=0.1");
  // Empty arguments before the first text add no space; later ones add theirs.
  p.cmdline = {"", "x", "", "y"};
  EXPECT_EQ(p.command_line(), "x  y");
}

TEST(ParseEnviron, OnlyRequestedKeys) {
  auto e = parse_environ(fixture("normal.environ"), {"CUDA_VISIBLE_DEVICES", "WEIRD", "EMPTY", "MISSING"});
  EXPECT_EQ(e, (std::vector<std::pair<std::string, std::string>>{
                   {"CUDA_VISIBLE_DEVICES", "0,1"}, {"WEIRD", "a=b"}, {"EMPTY", ""}}));
  EXPECT_TRUE(parse_environ(fixture("normal.environ"), {}).empty());
}

TEST(ParseEnviron, FirstOccurrenceWinsAndCutEntryDropped) {
  std::string text("A=1\0A=2\0NOEQ\0=x\0B=cut", 21);
  auto e = parse_environ(text, {"A", "B", ""});
  EXPECT_EQ(e, (std::vector<std::pair<std::string, std::string>>{{"A", "1"}}));
  EXPECT_TRUE(parse_environ("", {"A"}).empty());
}

// ---------------------------------------------------------------- /proc/devices

TEST(ParseCharDevices, Real) {
  auto d = parse_char_devices(fixture("devices"));
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(d.front(), (std::pair<unsigned, std::string>{1, "mem"}));
  for (const auto& [major, name] : d) EXPECT_NE(name, "virtblk");  // the block section is not included
}

TEST(ParseCharDevices, NvidiaAndMalformed) {
  auto d = parse_char_devices(
      "Character devices:\n  1 mem\n195 nvidia-frontend\nxx bad\n508 nvidia-uvm\n\nBlock devices:\n254 virtblk\n");
  EXPECT_EQ(d, (std::vector<std::pair<unsigned, std::string>>{
                   {1, "mem"}, {195, "nvidia-frontend"}, {508, "nvidia-uvm"}}));
  EXPECT_TRUE(parse_char_devices("").empty());
  EXPECT_TRUE(parse_char_devices("254 virtblk\n").empty());
}

}  // namespace
}  // namespace gpureap::proc

namespace gpureap::proc {
namespace {

TEST(ParseMappedFiles, Real) {
  auto files = parse_mapped_files(fixture("gpu_holder.maps"));
  // Each file once, in order; no [heap], [vdso], [stack] or anonymous mapping.
  EXPECT_EQ(files, (std::vector<std::string>{
                       "/root/.pyenv/versions/3.11.7/bin/python3.11", "/dev/zero (deleted)",
                       "/tmp/gpureap-maps/gone (deleted)", "/tmp/gpureap-maps/with space",
                       "/usr/lib/x86_64-linux-gnu/libc.so.6", "/tmp/gpureap-maps/dev/nvidia-uvm",
                       "/usr/lib/x86_64-linux-gnu/gconv/gconv-modules.cache"}));
}

TEST(ParseMappedFiles, CutAndMalformedLines) {
  // A cut last line is not trusted (it could be a cut path); fewer than five
  // fields is no mapping line.
  EXPECT_EQ(parse_mapped_files("7f00-7f01 rw-s 00000000 00:05 7     /dev/nvidiactl\n"
                               "7f01-7f02 rw-s 00000000 00:05\n"
                               "7f02-7f03 rw-s 00000000 00:05 9     /dev/nvidia-u"),
            (std::vector<std::string>{"/dev/nvidiactl"}));
  EXPECT_TRUE(parse_mapped_files("").empty());
  EXPECT_TRUE(parse_mapped_files("garbage\n\n").empty());
}

TEST(DistinctCgroupPaths, KeepsMemoryV2AndTheFirstOfEachOtherPath) {
  const std::string text =
      "12:pids:/kubepods/podA/c1\n"
      "11:cpu,cpuacct:/kubepods/podA/c1\n"
      "10:memory:/kubepods/podA/c1\n"
      "9:devices:/other\n"
      "8:blkio:/other\n"
      "0::/kubepods/podA/c1\n";
  auto lines = distinct_cgroup_paths(parse_cgroup(text));
  ASSERT_EQ(lines.size(), 4U);
  EXPECT_EQ(lines[0].controllers, "pids");
  EXPECT_EQ(lines[1].controllers, "memory");
  EXPECT_EQ(lines[2].controllers, "devices");
  EXPECT_EQ(lines[3].hierarchy_id, 0U);
  EXPECT_TRUE(distinct_cgroup_paths({}).empty());
}

}  // namespace
}  // namespace gpureap::proc
