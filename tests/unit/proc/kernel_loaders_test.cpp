// The descriptor scan's loaders and each fallback, by failure injection into
// the real kernel calls: a seccomp filter that refuses one bpf(2) command
// (the light skeleton runs its loader with BPF_PROG_RUN; iterators need
// BPF_LINK_CREATE), and a private mount namespace whose /sys/kernel/btf is an
// empty tmpfs (no kernel BTF). Each scan runs in a forked child, so the
// filter and the mount never touch the test process.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/audit.h>
#include <linux/bpf.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "child.hpp"
#include "proc/bpf/kernel_scan_loaders.h"
#include "proc/kernel_fds.hpp"
#include "proc/scan.hpp"
#include "sim_device.hpp"

namespace gpureap::proc {
namespace {

namespace fs = std::filesystem;
using test::Child;
using test::Pipes;
using test::spawn_ready;

// In the child: every later bpf(2) with this command fails with EINVAL, as on
// a kernel that does not know it.
bool refuse_bpf_command(unsigned command) {
  constexpr auto kNr = static_cast<unsigned>(offsetof(seccomp_data, nr));
  constexpr auto kArch = static_cast<unsigned>(offsetof(seccomp_data, arch));
  constexpr auto kCmd = static_cast<unsigned>(offsetof(seccomp_data, args));  // low half of args[0]
  sock_filter filter[] = {
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, kArch},
      {BPF_JMP | BPF_JEQ | BPF_K, 1, 0, AUDIT_ARCH_X86_64},
      {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW},
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, kNr},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 3, static_cast<unsigned>(SYS_bpf)},
      {BPF_LD | BPF_W | BPF_ABS, 0, 0, kCmd},
      {BPF_JMP | BPF_JEQ | BPF_K, 0, 1, command},
      {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ERRNO | (EINVAL & SECCOMP_RET_DATA)},
      {BPF_RET | BPF_K, 0, 0, SECCOMP_RET_ALLOW},
  };
  sock_fprog prog{static_cast<unsigned short>(sizeof filter / sizeof filter[0]), filter};
  return ::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0 &&
         ::syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &prog) == 0;
}

// In the child: this process alone sees an empty /sys/kernel/btf.
bool hide_kernel_btf() {
  return ::unshare(CLONE_NEWNS) == 0 &&
         ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0 &&
         ::mount("tmpfs", "/sys/kernel/btf", "tmpfs", 0, nullptr) == 0;
}

struct Outcome {
  bool injected = false;
  std::string fds_from, fds_loader, fds_note;
  unsigned holder_fds = 0;   // the holder's descriptors on the device file, as the scan saw them
  std::string kernel_error;  // FdSource::kernel's error, "" when it answered
};

// Forks; the child applies `inject`, scans twice (auto, then kernel only) and
// writes what it saw to a pipe, one field per line.
template <class Inject>
Outcome scan_in_child(const DeviceMatcher& devices, pid_t holder, Inject&& inject) {
  int out[2];
  if (::pipe2(out, O_CLOEXEC) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    std::string text;
    if (inject()) {
      text += "1\n";
      auto root = sys::HostRoot::open("/");
      ScanOptions opts;
      opts.devices = &devices;
      auto a = root ? scan_processes(*root, opts) : sys::Result<ProcessTable>(root.error());
      if (a) {
        unsigned n = 0;
        for (const auto& p : a->processes) {
          if (p.pid != holder) continue;
          for (const auto& d : p.gpu_fds) n += d.count;
        }
        text += a->stats.fds_from + "\n" + a->stats.fds_loader + "\n" + a->stats.fds_note + "\n" +
                std::to_string(n) + "\n";
      } else {
        text += "error\n\n" + a.error().message + "\n0\n";
      }
      opts.fd_source = FdSource::kernel;
      auto k = root ? scan_processes(*root, opts) : sys::Result<ProcessTable>(root.error());
      text += k ? "" : k.error().message;
      text += "\n";
    } else {
      text += std::string("0\n") + std::strerror(errno) + "\n";
    }
    (void)!::write(out[1], text.data(), text.size());
    ::_exit(0);
  }
  ::close(out[1]);
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(out[0], buf, sizeof buf)) != 0;) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    text.append(buf, static_cast<std::size_t>(n));
  }
  ::close(out[0]);
  if (pid > 0) {
    while (::waitpid(pid, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  std::vector<std::string> lines;
  for (std::size_t at = 0, nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    lines.push_back(text.substr(at, nl - at));
  }
  Outcome o;
  if (lines.size() < 6 || lines[0] != "1") {
    o.fds_note = lines.size() > 1 ? lines[1] : text;  // why the injection failed
    return o;
  }
  o.injected = true;
  o.fds_from = lines[1];
  o.fds_loader = lines[2];
  o.fds_note = lines[3];
  o.holder_fds = static_cast<unsigned>(std::stoul(lines[4]));
  o.kernel_error = lines[5];
  return o;
}

// A temp "device" file and a child holding 3 descriptors on it.
class KernelLoaders : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "BPF iterators, seccomp and mounts need root";
    std::string tmpl = (fs::temp_directory_path() / "gpureap-loaders-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = fs::canonical(tmpl);
    const std::string dev = (dir_ / "nvidia0").string();
    const auto node = test::sim_device_file("nvidia0", dev);
    ASSERT_TRUE(node.has_value());
    devices_.nodes.push_back(*node);
    holder_.emplace(spawn_ready(pipes_, [&] {
      for (int i = 0; i < 3; ++i) ::open(dev.c_str(), O_RDONLY);
    }));
    ASSERT_TRUE(holder_->started());
  }
  void TearDown() override {
    holder_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  fs::path dir_;
  DeviceMatcher devices_;
  Pipes pipes_;
  std::optional<Child> holder_;
};

// Kernel CO-RE for the light skeleton's loader came in Linux 5.17.
bool kernel_runs_light_skeletons() {
  utsname u{};
  if (::uname(&u) != 0) return false;
  unsigned major = 0, minor = 0;
  if (std::sscanf(u.release, "%u.%u", &major, &minor) != 2) return false;
  return major > 5 || (major == 5 && minor >= 17);
}

// The end of a real verifier log (Linux 6.18, libbpf's fixup of a CO-RE
// relocation that did not resolve applied), captured in a session that
// broke one on purpose.
constexpr std::string_view kCapturedLogTail =
    "174: R1=1\n"
    "175: <invalid CO-RE relocation>\n"
    "failed to resolve CO-RE relocation <byte_off> [63] struct mm_struct.mmap_lock.count "
    "(0:4:0 @ offset 32)\n"
    "verification time 6593 usec\n"
    "stack depth 384+0+0+0+0\n"
    "processed 182 insns (limit 1000000) max_states_per_insn 0 total_states 14 peak_states 14 "
    "mark_read 0\n";
constexpr std::string_view kCapturedReason =
    "failed to resolve CO-RE relocation <byte_off> [63] struct mm_struct.mmap_lock.count "
    "(0:4:0 @ offset 32)";

std::string reason_of(std::string log, std::size_t reason_len = 121) {
  std::string reason(reason_len, 'x');
  const std::size_t n =
      gpureap_verifier_reason(log.data(), log.size(), reason.data(), reason.size());
  EXPECT_EQ(n, std::strlen(reason.c_str()));
  return reason.substr(0, n);
}

TEST(VerifierReason, IsTheLastLineBeforeTheVerifiersStatistics) {
  EXPECT_EQ(reason_of(std::string(kCapturedLogTail) + '\0'), kCapturedReason);
  // A plain refusal, no statistics after it.
  EXPECT_EQ(reason_of("0: (79) r1 = *(u64 *)(r1 +0)\nR1 invalid mem access 'scalar'\n"),
            "R1 invalid mem access 'scalar'");
}

TEST(VerifierReason, AFullBufferWithoutItsNulStillGivesTheReason) {
  // libbpf shifts the log when it rewrites a line: a full buffer can lose its
  // NUL. Nothing past the buffer is read; its last byte becomes the end.
  std::string log(kCapturedLogTail);
  EXPECT_EQ(reason_of(log), kCapturedReason);
  // Cut inside the reason itself: what is there.
  log = std::string(kCapturedLogTail.substr(0, kCapturedLogTail.find("(0:4:0")));
  EXPECT_EQ(reason_of(log), kCapturedReason.substr(0, kCapturedReason.find("(0:4:0") - 1));
}

TEST(VerifierReason, StopsAtTheFirstByteThatIsNotText) {
  std::string log = "R2 type=scalar expected=fp\xef\xbf\xbd\x7f garbage\nprocessed 9 insns\n";
  log += '\0';
  EXPECT_EQ(reason_of(log), "R2 type=scalar expected=fp");
  EXPECT_EQ(reason_of(std::string(kCapturedLogTail) + '\0', 11), "failed to ");
}

TEST(VerifierReason, NoneWithoutALineOfItsOwn) {
  EXPECT_EQ(reason_of(std::string("", 1)), "");
  EXPECT_EQ(reason_of(std::string("verification time 5 usec\nstack depth 8\n") + '\0'), "");
  EXPECT_EQ(gpureap_verifier_reason(nullptr, 0, nullptr, 0), 0U);
  char reason[4] = "abc";
  EXPECT_EQ(gpureap_verifier_reason(nullptr, 0, reason, sizeof reason), 0U);
  EXPECT_STREQ(reason, "");
}

TEST(KernelRelease, ComparesMajorAndMinorOfUnamesRelease) {
  EXPECT_TRUE(kernel_release_at_least("6.18.44-fc-v1272-gpu", 6, 17));
  EXPECT_TRUE(kernel_release_at_least("6.17", 6, 17));
  EXPECT_TRUE(kernel_release_at_least("7.0.1", 6, 17));
  EXPECT_FALSE(kernel_release_at_least("6.16.9", 6, 17));
  EXPECT_FALSE(kernel_release_at_least("6.8.0-90-generic", 6, 17));
  EXPECT_FALSE(kernel_release_at_least("5.19.0", 6, 17));
  EXPECT_TRUE(kernel_release_at_least("6.100.0", 6, 17));  // numbers, not text
  // Not two numbers first: not known to be new enough.
  EXPECT_FALSE(kernel_release_at_least("", 6, 17));
  EXPECT_FALSE(kernel_release_at_least("6", 6, 0));
  EXPECT_FALSE(kernel_release_at_least("6.", 6, 0));
  EXPECT_FALSE(kernel_release_at_least("v6.18", 6, 17));
  EXPECT_FALSE(kernel_release_at_least("6-18", 6, 17));
}

TEST_F(KernelLoaders, TheLightSkeletonAnswersWhereTheKernelRunsItsLoader) {
  auto o = scan_in_child(devices_, holder_->pid(), [] { return true; });
  ASSERT_TRUE(o.injected) << o.fds_note;
  EXPECT_EQ(o.fds_from, "bpf");
  EXPECT_EQ(o.fds_loader, kernel_runs_light_skeletons() ? "light_skeleton" : "libbpf_skeleton");
  if (kernel_runs_light_skeletons()) {
    // The direct-reads build loads from 6.17 on; before, it is not tried, and
    // the probe build is no fallback: either way, nothing to note.
    EXPECT_EQ(o.fds_note, "");
  }
  EXPECT_EQ(o.holder_fds, 3U);
  EXPECT_EQ(o.kernel_error, "");
}

TEST_F(KernelLoaders, WithoutLightSkeletonSupportLibbpfLoadsAndTheNoteSaysWhy) {
  // The light skeleton's loader is a BPF_PROG_TYPE_SYSCALL program run with
  // BPF_PROG_RUN; a kernel that cannot run it refuses like this.
  auto o = scan_in_child(devices_, holder_->pid(), [] { return refuse_bpf_command(BPF_PROG_RUN); });
  ASSERT_TRUE(o.injected) << o.fds_note;
  EXPECT_EQ(o.fds_from, "bpf");
  EXPECT_EQ(o.fds_loader, "libbpf_skeleton");
  if (direct_reads_possible()) {
    EXPECT_NE(o.fds_note.find("light skeleton, direct reads: the kernel's loader program"),
              std::string::npos)
        << o.fds_note;
    EXPECT_NE(o.fds_note.find("; light skeleton: the kernel's loader program"), std::string::npos)
        << o.fds_note;
  } else {
    EXPECT_EQ(o.fds_note.rfind("light skeleton: the kernel's loader program", 0), 0U) << o.fds_note;
  }
  EXPECT_NE(o.fds_note.find("Invalid argument"), std::string::npos) << o.fds_note;
  EXPECT_EQ(o.holder_fds, 3U);
  EXPECT_EQ(o.kernel_error, "");
}

TEST_F(KernelLoaders, WithoutIteratorSupportTheScanWalksProcAndTheNoteNamesEachLoader) {
  // Iterators are attached with BPF_LINK_CREATE (Linux 5.8): refused, neither
  // skeleton can start one.
  auto o =
      scan_in_child(devices_, holder_->pid(), [] { return refuse_bpf_command(BPF_LINK_CREATE); });
  ASSERT_TRUE(o.injected) << o.fds_note;
  EXPECT_EQ(o.fds_from, "procfs");
  EXPECT_EQ(o.fds_loader, "");
  if (direct_reads_possible()) {
    EXPECT_NE(o.fds_note.find("light skeleton, direct reads: attach the BPF descriptor iterator: "
                              "Invalid argument"),
              std::string::npos)
        << o.fds_note;
  }
  EXPECT_NE(o.fds_note.find("light skeleton: attach the BPF descriptor iterator: Invalid argument"),
            std::string::npos)
      << o.fds_note;
  EXPECT_NE(
      o.fds_note.find("libbpf skeleton: attach the BPF descriptor iterator: Invalid argument"),
      std::string::npos)
      << o.fds_note;
  // The task_file form, the last before /proc, cannot either.
  EXPECT_NE(
      o.fds_note.find("libbpf task_file: attach the BPF descriptor iterator: Invalid argument"),
      std::string::npos)
      << o.fds_note;
  EXPECT_EQ(o.holder_fds, 3U);  // the /proc walk still sees the holder
  EXPECT_NE(o.kernel_error.find("libbpf task_file"), std::string::npos) << o.kernel_error;
}

TEST_F(KernelLoaders, WithoutKernelBtfTheScanWalksProcAndSaysSo) {
  auto o = scan_in_child(devices_, holder_->pid(), hide_kernel_btf);
  ASSERT_TRUE(o.injected) << o.fds_note;
  EXPECT_EQ(o.fds_from, "procfs");
  EXPECT_EQ(o.fds_note, "no kernel BTF: stat /sys/kernel/btf/vmlinux: No such file or directory");
  EXPECT_EQ(o.holder_fds, 3U);
  EXPECT_EQ(o.kernel_error, o.fds_note);
}

}  // namespace
}  // namespace gpureap::proc
