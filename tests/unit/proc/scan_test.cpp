// The scan against real processes this test starts (fd counting, zombie, PID
// namespace, thread id) and against a fake host root built from fixtures
// (vanished / malformed counting, device matching by path and by rdev).
#include "proc/scan.hpp"

#include <gtest/gtest.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <linux/types.h>
#include <sched.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <optional>
#include <thread>

#include "child.hpp"
#include "fixtures.hpp"
#include "proc/bpf/records.h"
#include "proc/kernel_fds.hpp"
#include "proc/parse.hpp"
#include "proc/process_memory.hpp"
#include "sim_device.hpp"
#include "test_support.hpp"

namespace gpureap::proc {
namespace {

namespace fs = std::filesystem;
using test::after_this_clock_tick;
using test::Child;
using test::fixture;
using test::Pipes;
using test::sim_device_file;
using test::spawn_ready;

sys::HostRoot slash() {
  auto r = sys::HostRoot::open("/");
  EXPECT_TRUE(r.ok());
  return std::move(r).value();
}

// A temporary directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "gpureap-proc-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) != nullptr) path = fs::canonical(tmpl);  // fd links show canonical paths
  }
  ~TempDir() {
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
};

void write_file(const fs::path& p, std::string_view content) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << content;
}

// What a forked scanner wrote to its end of a pipe, read up to EOF; closes `fd`.
std::string read_to_end(int fd) {
  std::string text;
  char buf[4096];
  for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;)
    text.append(buf, static_cast<std::size_t>(n));
  ::close(fd);
  return text;
}

const Process* find(const ProcessTable& t, pid_t pid) {
  auto it = std::lower_bound(t.processes.begin(), t.processes.end(), pid,
                             [](const Process& p, pid_t v) { return p.pid < v; });
  return it != t.processes.end() && it->pid == pid ? &*it : nullptr;
}

// ---------------------------------------------------------------- real processes

TEST(ScanReal, CountsDescriptorsOnMatchedPath) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  write_file(dev, "");
  constexpr int kOpens = 7;
  Pipes pipes;
  ASSERT_TRUE(pipes.ok());
  Child child = spawn_ready(pipes, [&] {
    for (int i = 0; i < kOpens; ++i) ::open(dev.c_str(), O_RDONLY);
  });
  ASSERT_TRUE(child.started());

  DeviceMatcher m;
  m.nodes.push_back(DeviceNode{"nvidia0", dev, std::nullopt, std::nullopt});
  ScanOptions opts;
  opts.devices = &m;
  auto root = slash();
  auto p = read_process(root, child.pid(), opts);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->pid, child.pid());
  EXPECT_EQ(p->tgid, child.pid());
  EXPECT_EQ(p->ppid, ::getpid());
  EXPECT_TRUE(p->fds_readable);
  EXPECT_EQ(p->fd_count, static_cast<unsigned>(kOpens + 2));  // + the two pipe ends
  EXPECT_EQ(p->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", kOpens}}));
  EXPECT_EQ(p->gpu_fd_total(), static_cast<unsigned>(kOpens));
  EXPECT_FALSE(p->cmdline.empty());  // forked, not exec'd: the test binary's argv
  EXPECT_FALSE(p->cgroups.empty());
  EXPECT_GT(p->start_time, 0u);

  // The whole-system scan sees the same, on one thread and on several.
  for (unsigned threads : {1u, 4u}) {
    opts.threads = threads;
    auto t = scan_processes(root, opts);
    ASSERT_TRUE(t.ok()) << t.error().message;
    EXPECT_TRUE(std::is_sorted(t->processes.begin(), t->processes.end(),
                               [](const Process& a, const Process& b) { return a.pid < b.pid; }));
    EXPECT_GE(t->stats.listed, t->stats.scanned);
    EXPECT_EQ(t->stats.listed,
              t->stats.scanned + t->stats.vanished + t->stats.denied + t->stats.malformed);
    const Process* q = find(*t, child.pid());
    ASSERT_NE(q, nullptr) << "threads=" << threads;
    EXPECT_EQ(q->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", kOpens}}));
    const Process* self = find(*t, ::getpid());
    ASSERT_NE(self, nullptr);
    EXPECT_TRUE(self->gpu_fds.empty());
  }
}

// Where the fd links are hidden from the scan (the ptrace check of a
// security module or another user namespace; readlinkat refused here by a
// seccomp filter whose answers this test counts), the descriptors are still
// counted, nothing is matched, the process is marked unreadable, and the
// scan asks once: the check is the process's, not each descriptor's.
TEST(ScanReal, HiddenLinksAreCountedAndAskedForOnce) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  write_file(dev, "");
  Pipes pipes;
  ASSERT_TRUE(pipes.ok());
  Child holder = spawn_ready(pipes, [&] {
    for (int i = 0; i < 5; ++i) ::open(dev.c_str(), O_RDONLY);
  });
  ASSERT_TRUE(holder.started());

  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_readlinkat, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ::_exit(2);
    const long listener =
        ::syscall(__NR_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &prog);
    if (listener < 0) ::_exit(2);
    // A thread of this process answers each readlinkat with EACCES, counting
    // them; the count is up before the call it answers returns.
    std::atomic<unsigned> asked{0};
    std::thread answers([&asked, fd = static_cast<int>(listener)] {
      for (;;) {
        seccomp_notif req{};
        if (::ioctl(fd, SECCOMP_IOCTL_NOTIF_RECV, &req) != 0) {
          if (errno == EINTR) continue;
          return;
        }
        asked.fetch_add(1);
        seccomp_notif_resp resp{};
        resp.id = req.id;
        resp.error = -EACCES;
        (void)::ioctl(fd, SECCOMP_IOCTL_NOTIF_SEND, &resp);
      }
    });
    answers.detach();  // ends with this process
    DeviceMatcher m;
    m.nodes.push_back(DeviceNode{"nvidia0", dev, std::nullopt, std::nullopt});
    ScanOptions opts;
    opts.devices = &m;
    opts.fd_source = FdSource::procfs;
    auto root = sys::HostRoot::open("/");
    if (!root) ::_exit(3);
    auto p = read_process(*root, holder.pid(), opts);
    if (!p) ::_exit(4);
    const std::string report =
        std::to_string(p->fd_count) + " " + (p->fds_readable ? "readable" : "hidden") + " " +
        std::to_string(p->gpu_fds.size()) + " " + std::to_string(asked.load());
    (void)!::write(out[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(out[1]);
  ASSERT_GT(pid, 0);
  Child scanner(pid);
  const std::string report = read_to_end(out[0]);
  int status = 0;
  while (::waitpid(scanner.pid(), &status, 0) < 0 && errno == EINTR) {
  }
  scanner.release();  // reaped
  // 5 opens and the two pipe ends; an empty report: the scanner's exit status says where it
  // stopped.
  EXPECT_EQ(report, "7 hidden 0 1") << "scanner status " << status;
}

TEST(ScanReal, MatchesCharDevicesByRdevAndMajor) {
  // /dev/full is char 1:7 and /dev/zero 1:5 on every Linux: stand-ins for /dev/nvidia*.
  struct stat full_st {};
  ASSERT_EQ(::stat("/dev/full", &full_st), 0);
  Pipes pipes;
  Child child = spawn_ready(pipes, [] {
    for (int i = 0; i < 3; ++i) ::open("/dev/full", O_RDONLY);
    for (int i = 0; i < 2; ++i) ::open("/dev/zero", O_RDONLY);
    ::open("/dev/null", O_RDONLY);  // major 1 too, but never stat'ed: not a GPU on any node
  });
  ASSERT_TRUE(child.started());
  DeviceMatcher m;
  // Listed by rdev under another path: the rdev decides.
  m.nodes.push_back(DeviceNode{"fake-full", "/dev/not-this-path", full_st.st_rdev, std::nullopt});
  m.majors.push_back(major(full_st.st_rdev));
  ScanOptions opts;
  opts.devices = &m;
  auto p = read_process(slash(), child.pid(), opts);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->gpu_fds, (std::vector<DeviceUse>{{"fake-full", 3}, {"nvidia-1:5", 2}}));
  EXPECT_EQ(p->fd_count, 8u);
}

TEST(ScanReal, ManyDescriptorsNeedSeveralGetdents) {
  // More entries than one 32 KiB getdents64 buffer holds (~24 bytes each).
  TempDir dir;
  const std::string dev = (dir.path / "nvidia0").string();
  write_file(dev, "");
  constexpr int kOpens = 3000;
  struct rlimit lim {};
  ASSERT_EQ(::getrlimit(RLIMIT_NOFILE, &lim), 0);
  if (lim.rlim_max < kOpens + 64) {
    // Root may raise the hard limit; the child below raises its own soft one.
    struct rlimit raised = {lim.rlim_cur, kOpens + 64};
    ASSERT_EQ(::setrlimit(RLIMIT_NOFILE, &raised), 0) << "cannot raise RLIMIT_NOFILE (needs root)";
  }
  Pipes pipes;
  Child child = spawn_ready(pipes, [&] {
    struct rlimit want = {kOpens + 64, kOpens + 64};
    ::setrlimit(RLIMIT_NOFILE, &want);
    for (int i = 0; i < kOpens; ++i) ::open(dev.c_str(), O_RDONLY);
  });
  ASSERT_TRUE(child.started());
  DeviceMatcher m;
  m.nodes.push_back(DeviceNode{"nvidia0", dev, std::nullopt, std::nullopt});
  ScanOptions opts;
  opts.devices = &m;
  auto p = read_process(slash(), child.pid(), opts);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->fd_count, static_cast<unsigned>(kOpens + 2));
  EXPECT_EQ(p->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", kOpens}}));
}

TEST(ScanReal, NoMatcherCountsFdsOnly) {
  Pipes pipes;
  Child child = spawn_ready(pipes, [] { ::open("/dev/null", O_RDONLY); });
  ASSERT_TRUE(child.started());
  ScanOptions opts;
  auto p = read_process(slash(), child.pid(), opts);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->fd_count, 3u);
  EXPECT_TRUE(p->gpu_fds.empty());
  opts.read_fds = false;
  auto q = read_process(slash(), child.pid(), opts);
  ASSERT_TRUE(q.ok());
  EXPECT_FALSE(q->fds_readable);
  EXPECT_EQ(q->fd_count, 0u);
}

TEST(ScanReal, ZombieIsAValidEntry) {
  pid_t pid = ::fork();
  if (pid == 0) ::_exit(0);
  Child child(pid);
  ASSERT_GT(pid, 0);
  // Wait until it has exited but leave it unreaped: a zombie.
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT), 0);

  ScanOptions opts;
  auto root = slash();
  auto p = read_process(root, pid, opts);
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->state, 'Z');
  EXPECT_TRUE(p->zombie());
  EXPECT_TRUE(p->cmdline.empty());
  EXPECT_EQ(p->fd_count, 0u);
  EXPECT_EQ(p->ppid, ::getpid());

  auto t = scan_processes(root, opts);
  ASSERT_TRUE(t.ok());
  const Process* z = find(*t, pid);
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->state, 'Z');
}

TEST(ScanReal, PidNamespaceGivesHostAndLocalPid) {
  Pipes pipes;
  ASSERT_TRUE(pipes.ok());
  // clone(CLONE_NEWPID) with no new stack behaves like fork; the child is pid 1 inside.
  long rc = ::syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (rc == 0) {
    pipes.child_setup();
    test::child_ready_and_wait();
  }
  ASSERT_GT(rc, 0) << "clone(CLONE_NEWPID) failed (the suite runs as root): " << std::strerror(errno);
  Child child(static_cast<pid_t>(rc));
  ASSERT_TRUE(pipes.wait_ready());

  auto p = read_process(slash(), child.pid(), ScanOptions{});
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_EQ(p->nspid, (std::vector<pid_t>{child.pid(), 1}));
  EXPECT_EQ(p->local_pid(), 1);
  EXPECT_EQ(p->pid, child.pid());
}

TEST(ScanReal, ThreadIdResolvesToThreadGroup) {
  std::mutex mu;
  std::condition_variable cv;
  pid_t tid = 0;
  bool done = false;
  std::thread worker([&] {
    std::unique_lock lock(mu);
    tid = static_cast<pid_t>(::syscall(SYS_gettid));
    cv.notify_all();
    cv.wait(lock, [&] { return done; });
  });
  {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return tid != 0; });
  }
  auto p = read_process(slash(), tid, ScanOptions{});
  {
    std::lock_guard lock(mu);
    done = true;
  }
  cv.notify_all();
  worker.join();
  ASSERT_TRUE(p.ok()) << p.error().message;
  EXPECT_NE(tid, ::getpid());
  EXPECT_EQ(p->tgid, ::getpid());
  EXPECT_EQ(p->pid, ::getpid());
}

TEST(ScanReal, KernelThreadHasNoCmdlineOrFds) {
  // kthreadd and its children are kernel threads; find one by its PF_KTHREAD flag.
  std::optional<pid_t> kthread;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream in(entry.path() / "stat");
    std::string line;
    std::getline(in, line);
    auto st = parse_stat(line + "\n");
    if (st && st->kernel_thread()) {
      kthread = static_cast<pid_t>(std::stol(name));
      break;
    }
  }
  ASSERT_TRUE(kthread) << "no kernel thread visible in /proc";
  auto p = read_process(slash(), *kthread, ScanOptions{});
  ASSERT_TRUE(p.ok());
  EXPECT_TRUE(p->cmdline.empty());
  EXPECT_EQ(p->fd_count, 0u);
  EXPECT_TRUE(p->fds_readable);
}

TEST(ScanReal, GonePidIsVanished) {
  auto p = read_process(slash(), INT_MAX - 1, ScanOptions{});  // above any pid_max
  ASSERT_FALSE(p.ok());
  EXPECT_TRUE(p.error().vanished()) << p.error().message;
  auto q = read_process(slash(), 0, ScanOptions{});
  EXPECT_FALSE(q.ok());
}

// ---------------------------------------------------------------- fake host root

// ---------------------------------------------------------------- the kernel descriptor iterator

// A child that reports ready, then closes every descriptor and pauses: the
// iterator has no record of it, so the scan must confirm "no fds" in /proc.
Child spawn_fdless(Pipes& pipes) {
  pid_t pid = ::fork();
  if (pid == 0) {
    pipes.child_setup();
    char c = 'r';
    (void)!::write(test::kReadyFd, &c, 1);
    ::syscall(SYS_close_range, 0u, ~0u, 0u);
    for (;;) ::pause();
  }
  Child child(pid);
  if (pid > 0 && !pipes.wait_ready()) child.reap();
  // Ready comes before its close_range: wait until the descriptors are gone
  // too (on a loaded machine a scan could otherwise still see them).
  const fs::path fds = "/proc/" + std::to_string(pid) + "/fd";
  for (int i = 0; child.started() && i < 2000; ++i) {
    std::error_code ec;
    if (fs::directory_iterator(fds, ec) == fs::directory_iterator() && !ec) break;
    ::usleep(1000);
  }
  return child;
}

TEST(KernelFds, AgreesWithTheProcfsWalkOnEveryChild) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  const auto dev_node = sim_device_file("nvidia0", dev);
  ASSERT_TRUE(dev_node.has_value());
  struct stat full_st {};
  ASSERT_EQ(::stat("/dev/full", &full_st), 0);

  Pipes p1, p2, p3, p4, p5, p6;
  Child by_file = spawn_ready(p1, [&] {
    for (int i = 0; i < 7; ++i) ::open(dev.c_str(), O_RDONLY);
  });
  Child by_rdev = spawn_ready(p2, [] {
    for (int i = 0; i < 3; ++i) ::open("/dev/full", O_RDONLY);
    for (int i = 0; i < 2; ++i) ::open("/dev/zero", O_RDONLY);   // major 1 only: named by number
    ::open("/dev/null", O_RDONLY);                                 // major 1, but never a GPU
  });
  Child fdless = spawn_fdless(p3);
  Child many = spawn_ready(p4, [&] {
    for (int i = 0; i < 300; ++i) ::open(i % 2 == 0 ? dev.c_str() : "/dev/null", O_RDONLY);
  });
  // More GPU candidates than the table walk writes for one table (records.h:
  // GPUREAP_MAX_CANDIDATES): the walk says so and /proc answers for it.
  Child over_cap = spawn_ready(p5, [] {
    for (int i = 0; i < 300; ++i) ::open("/dev/zero", O_RDONLY);
  });
  // A descriptor numbered far past 64: the table has grown to 8192 slots.
  Child high_fd = spawn_ready(p6, [&] {
    rlimit lim{8192, 8192};
    ::setrlimit(RLIMIT_NOFILE, &lim);
    int fd = ::open(dev.c_str(), O_RDONLY);
    ::dup2(fd, 5000);
  });
  const std::vector<const Child*> children = {&by_file, &by_rdev,  &fdless,
                                              &many,    &over_cap, &high_fd};
  for (const Child* c : children) ASSERT_TRUE(c->started());
  after_this_clock_tick();

  DeviceMatcher m;
  m.nodes.push_back(*dev_node);
  m.nodes.push_back(DeviceNode{"fake-full", "/dev/not-this-path", full_st.st_rdev, std::nullopt});
  m.majors.push_back(1);
  auto root = slash();
  ScanOptions kernel_opts;
  kernel_opts.devices = &m;
  kernel_opts.fd_source = FdSource::kernel;
  ScanOptions procfs_opts = kernel_opts;
  procfs_opts.fd_source = FdSource::procfs;
  auto k = scan_processes(root, kernel_opts);
  ASSERT_TRUE(k.ok()) << k.error().message;
  auto w = scan_processes(root, procfs_opts);
  ASSERT_TRUE(w.ok()) << w.error().message;
  // The walk's other build: each inode member through bpf_probe_read_kernel.
  ScanOptions probe_opts = kernel_opts;
  probe_opts.kernel_reads = KernelReads::probe;
  auto pr = scan_processes(root, probe_opts);
  ASSERT_TRUE(pr.ok()) << pr.error().message;
  EXPECT_EQ(k->stats.fds_from, "bpf");
  EXPECT_EQ(w->stats.fds_from, "procfs");
  EXPECT_EQ(pr->stats.fds_from, "bpf");
  EXPECT_EQ(pr->stats.fds_loader, k->stats.fds_loader);

  for (const Child* c : children) {
    const Process* a = find(*k, c->pid());
    const Process* b = find(*w, c->pid());
    const Process* p = find(*pr, c->pid());
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(a->fd_count, b->fd_count) << c->pid();
    EXPECT_EQ(a->fds_readable, b->fds_readable) << c->pid();
    EXPECT_EQ(a->gpu_fds, b->gpu_fds) << c->pid();
    EXPECT_EQ(p->fd_count, a->fd_count) << c->pid();
    EXPECT_EQ(p->gpu_fds, a->gpu_fds) << c->pid();
    EXPECT_EQ(p->gpu_files, a->gpu_files) << c->pid();
  }
  EXPECT_EQ(find(*k, by_file.pid())->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 7}}));
  EXPECT_EQ(find(*k, by_rdev.pid())->gpu_fds,
            (std::vector<DeviceUse>{{"fake-full", 3},
                                    {"nvidia-1:" + std::to_string(::minor(makedev(1, 5))), 2}}));
  EXPECT_EQ(find(*k, fdless.pid())->fd_count, 0u);
  EXPECT_TRUE(find(*k, fdless.pid())->fds_readable);
  EXPECT_EQ(find(*k, many.pid())->fd_count, 302u);
  EXPECT_EQ(find(*k, many.pid())->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 150}}));
  EXPECT_EQ(find(*k, over_cap.pid())->gpu_fds,
            (std::vector<DeviceUse>{{"nvidia-1:" + std::to_string(::minor(makedev(1, 5))), 300}}));
  EXPECT_EQ(find(*k, high_fd.pid())->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 2}}));
  EXPECT_EQ(find(*k, high_fd.pid())->gpu_files.size(), 1u);  // one description, two numbers
}

// Threads sharing the table walk (each walks the processes whose tgid falls
// in its share) give what one reader gives: every process once, its threads'
// own tables with it, the tables sorted; and the scan on threads agrees.
TEST(KernelFds, AWalkSharedByThreadsGivesWhatOneReaderGives) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  const auto dev_node = sim_device_file("nvidia0", dev);
  ASSERT_TRUE(dev_node.has_value());
  // Consecutive pids, so every share of 4 (and most of 16) has some; each
  // holds a count of its own, and the last a thread with a table of its own.
  std::vector<Pipes> pipes(12);
  std::vector<Child> children;
  for (int i = 0; i < 11; ++i) {
    children.push_back(spawn_ready(pipes[static_cast<std::size_t>(i)], [&, i] {
      for (int n = 0; n <= i; ++n) ::open(dev.c_str(), O_RDONLY);
    }));
  }
  children.push_back(spawn_ready(pipes[11], [&] {
    int opened[2];
    if (::pipe(opened) != 0) ::_exit(1);
    std::thread([&] {
      ::unshare(CLONE_FILES);
      ::open(dev.c_str(), O_RDONLY);
      char c = 'o';
      (void)!::write(opened[1], &c, 1);
      for (;;) ::pause();
    }).detach();
    char c = 0;
    (void)!::read(opened[0], &c, 1);
  }));
  // And processes with argv of their own (exec'd): on threads, cmdlines are
  // read ahead while the programs load, each into its own process's slot.
  constexpr const char* kScript = "printf r >&100; read -r x <&101";
  std::vector<Pipes> exec_pipes(3);
  std::vector<Child> execed;
  for (int i = 0; i < 3; ++i) {
    const std::string marker = "marker-" + std::to_string(i);
    execed.push_back(spawn_ready(exec_pipes[static_cast<std::size_t>(i)], [&] {
      ::execl("/bin/bash", "bash", "-c", kScript, marker.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }));
  }
  for (const Child& c : children) ASSERT_TRUE(c.started());
  for (const Child& c : execed) ASSERT_TRUE(c.started());
  after_this_clock_tick();

  DeviceMatcher m;
  m.nodes.push_back(*dev_node);
  auto root = slash();
  auto one = read_kernel_fds(root, m, nullptr, 1);
  ASSERT_TRUE(one.ok()) << one.error().message;
  EXPECT_EQ(one->readers, 1u);
  for (unsigned shards : {4u, 16u, 40u}) {
    auto many = read_kernel_fds(root, m, nullptr, shards);
    ASSERT_TRUE(many.ok()) << many.error().message;
    EXPECT_EQ(many->readers, std::min(shards, 16u));
    auto by_tgid = [](const auto& a, const auto& b) { return a.tgid < b.tgid; };
    auto same_tgid = [](const auto& a, const auto& b) { return a.tgid == b.tgid; };
    EXPECT_TRUE(std::is_sorted(many->processes.begin(), many->processes.end(), by_tgid));
    EXPECT_TRUE(std::is_sorted(many->tasks.begin(), many->tasks.end(), by_tgid));
    EXPECT_EQ(std::adjacent_find(many->processes.begin(), many->processes.end(), same_tgid),
              many->processes.end());
    EXPECT_EQ(std::adjacent_find(many->tasks.begin(), many->tasks.end(), same_tgid),
              many->tasks.end());
    for (std::size_t i = 0; i < children.size(); ++i) {
      const pid_t pid = children[i].pid();
      const KernelFdSummary* a = one->find(pid);
      const KernelFdSummary* b = many->find(pid);
      ASSERT_NE(a, nullptr) << pid;
      ASSERT_NE(b, nullptr) << pid;
      const unsigned held = i < 11 ? static_cast<unsigned>(i + 1) : 1u;
      EXPECT_EQ(b->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", held}})) << shards << " " << pid;
      EXPECT_EQ(b->gpu_fds, a->gpu_fds) << shards << " " << pid;
      EXPECT_EQ(b->gpu_files, a->gpu_files) << shards << " " << pid;
      EXPECT_EQ(b->fd_count, a->fd_count) << shards << " " << pid;
      ASSERT_NE(many->find_task(pid), nullptr) << shards << " " << pid;
      EXPECT_EQ(many->find_task(pid)->start_ticks, one->find_task(pid)->start_ticks);
    }
  }

  ScanOptions opts;
  opts.devices = &m;
  opts.fd_source = FdSource::kernel;
  auto scan_one = scan_processes(root, opts);
  opts.threads = 4;
  auto scan_four = scan_processes(root, opts);
  ASSERT_TRUE(scan_one.ok()) << scan_one.error().message;
  ASSERT_TRUE(scan_four.ok()) << scan_four.error().message;
  for (const Child& c : children) {
    const Process* a = find(*scan_one, c.pid());
    const Process* b = find(*scan_four, c.pid());
    ASSERT_NE(a, nullptr);
    ASSERT_NE(b, nullptr);
    EXPECT_EQ(b->gpu_fds, a->gpu_fds) << c.pid();
    EXPECT_EQ(b->fd_count, a->fd_count) << c.pid();
    EXPECT_EQ(b->cmdline, a->cmdline) << c.pid();
    EXPECT_EQ(b->cgroups, a->cgroups) << c.pid();
  }
  for (std::size_t i = 0; i < execed.size(); ++i) {
    const std::vector<std::string> argv = {"bash", "-c", kScript, "marker-" + std::to_string(i)};
    for (const auto* table : {&*scan_one, &*scan_four}) {
      const Process* p = find(*table, execed[i].pid());
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(p->cmdline, argv) << execed[i].pid();
    }
  }
}

std::vector<CgroupLine> proc_cgroups(pid_t pid);  // below, with the cgroup tests

// A caller that scans again and again (the exporter) keeps the programs:
// loaded once, each later scan walks the tables again (the re-check of the
// scan before switched the walk off), and new device files load them afresh.
TEST(KernelFds, KeptProgramsLoadOnceAndAnswerEveryScan) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  const std::string other = (dir.path / "nvidia1").string();
  const auto dev_node = sim_device_file("nvidia0", dev);
  const auto other_node = sim_device_file("nvidia1", other);
  ASSERT_TRUE(dev_node.has_value() && other_node.has_value());
  Pipes pipes;
  Child holder = spawn_ready(pipes, [&] {
    for (int i = 0; i < 3; ++i) ::open(dev.c_str(), O_RDONLY);
    ::open(other.c_str(), O_RDONLY);
  });
  ASSERT_TRUE(holder.started());
  after_this_clock_tick();

  DeviceMatcher one;
  one.nodes.push_back(*dev_node);
  DeviceMatcher two = one;
  two.nodes.push_back(*other_node);
  KernelPrograms keep;
  auto scan = [&](const DeviceMatcher& m) {
    ScanOptions opts;
    opts.devices = &m;
    opts.fd_source = FdSource::kernel;
    opts.kernel_programs = &keep;
    return scan_processes(slash(), opts);
  };
  for (int round = 0; round < 3; ++round) {
    auto k = scan(one);
    ASSERT_TRUE(k.ok()) << k.error().message;
    EXPECT_EQ(k->stats.fds_from, "bpf");
    const Process* p = find(*k, holder.pid());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 3}})) << "round " << round;
    // Only the kernel's answer names the descriptions: the walk ran.
    EXPECT_EQ(p->gpu_files.size(), 3u) << "round " << round;
    EXPECT_EQ(p->fd_count, 6u) << "round " << round;  // and the ready and hold pipes
    EXPECT_EQ(p->cgroups, proc_cgroups(holder.pid())) << "round " << round;
  }
  EXPECT_EQ(keep.loads, 1u);
  auto k = scan(two);
  ASSERT_TRUE(k.ok()) << k.error().message;
  const Process* p = find(*k, holder.pid());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 3}, {"nvidia1", 1}}));
  EXPECT_EQ(keep.loads, 2u);
}

// A thread that unshared its descriptor table holds descriptors /proc/PID/fd
// (the leader's table) does not show; the kernel scan counts them for the
// process, whichever program walks (the table walk, or the task_file form
// it falls back to when more than 8 device files are regular files).
TEST(KernelFds, AThreadWithItsOwnDescriptorTableCountsForItsProcess) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  const auto dev_node = sim_device_file("nvidia0", dev);
  ASSERT_TRUE(dev_node.has_value());
  Pipes pipes;
  Child holder = spawn_ready(pipes, [&] {
    int opened[2];
    if (::pipe(opened) != 0) ::_exit(1);
    std::thread([&] {
      ::unshare(CLONE_FILES);
      ::open(dev.c_str(), O_RDONLY);
      ::open(dev.c_str(), O_RDONLY);
      char c = 'o';
      (void)!::write(opened[1], &c, 1);
      for (;;) ::pause();
    }).detach();
    char c = 0;
    (void)!::read(opened[0], &c, 1);
    ::open(dev.c_str(), O_RDONLY);  // after the unshare: the leader's table only
  });
  ASSERT_TRUE(holder.started());
  after_this_clock_tick();

  DeviceMatcher one;
  one.nodes.push_back(*dev_node);
  DeviceMatcher nine = one;  // eight more regular files: the task_file form answers
  for (int i = 1; i < 9; ++i) {
    const std::string other = (dir.path / ("nvidia" + std::to_string(i))).string();
    const auto node = sim_device_file("nvidia" + std::to_string(i), other);
    ASSERT_TRUE(node.has_value()) << other;
    nine.nodes.push_back(*node);
  }
  for (const DeviceMatcher* m : {&one, &nine}) {
    ScanOptions opts;
    opts.devices = m;
    opts.fd_source = FdSource::kernel;
    auto k = scan_processes(slash(), opts);
    ASSERT_TRUE(k.ok()) << k.error().message;
    const Process* p = find(*k, holder.pid());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(p->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 3}})) << k->stats.fds_loader;
    EXPECT_EQ(p->gpu_files.size(), 3u) << k->stats.fds_loader;
    if (m == &nine) {
      EXPECT_EQ(k->stats.fds_loader, "libbpf_task_file");
      EXPECT_NE(k->stats.fds_note.find("table walk: more than 8 device files are regular files"),
                std::string::npos)
          << k->stats.fds_note;
    } else {
      EXPECT_NE(k->stats.fds_loader, "libbpf_task_file");
    }
  }
}

TEST(KernelFds, TaskIteratorGivesWhatStatusGives) {
  // Another uid, a nested PID namespace, a zombie: the task iterator's uid,
  // NSpid and tgid must be /proc/PID/status's, so the scan may skip that file.
  Pipes p1, p2;
  Child other_uid = spawn_ready(p1, [] { (void)!::setresuid(4321, 4321, 4321); });
  long rc = ::syscall(SYS_clone, CLONE_NEWPID | SIGCHLD, nullptr, nullptr, nullptr, nullptr);
  if (rc == 0) {
    p2.child_setup();
    test::child_ready_and_wait();
  }
  ASSERT_GT(rc, 0) << std::strerror(errno);
  Child in_ns(static_cast<pid_t>(rc));
  ASSERT_TRUE(p2.wait_ready());
  pid_t z = ::fork();
  if (z == 0) ::_exit(0);
  ASSERT_GT(z, 0);
  Child zombie(z);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(z), &info, WEXITED | WNOWAIT), 0);  // exited, not reaped
  ASSERT_TRUE(other_uid.started());

  auto root = slash();
  auto k = read_kernel_fds(root, DeviceMatcher{});
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(k->tasks_note, "");
  const KernelTask* t = k->find_task(in_ns.pid());
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->levels, 2);
  EXPECT_EQ(t->nspid[1], 1);
  ASSERT_NE(k->find_task(other_uid.pid()), nullptr);
  EXPECT_EQ(k->find_task(other_uid.pid())->uid, 4321u);

  ScanOptions kernel_opts;
  kernel_opts.fd_source = FdSource::kernel;
  ScanOptions procfs_opts;
  procfs_opts.fd_source = FdSource::procfs;
  auto a = scan_processes(root, kernel_opts);
  auto b = scan_processes(root, procfs_opts);
  ASSERT_TRUE(a.ok() && b.ok());
  for (pid_t pid : {other_uid.pid(), in_ns.pid(), zombie.pid(), pid_t{1}}) {
    const Process* x = find(*a, pid);
    const Process* y = find(*b, pid);
    ASSERT_NE(x, nullptr) << pid;
    ASSERT_NE(y, nullptr) << pid;
    EXPECT_EQ(x->tgid, y->tgid) << pid;
    EXPECT_EQ(x->uid, y->uid) << pid;
    EXPECT_EQ(x->nspid, y->nspid) << pid;
    EXPECT_EQ(x->state, y->state) << pid;
    EXPECT_EQ(x->comm, y->comm) << pid;
    EXPECT_EQ(x->start_time, y->start_time) << pid;
  }
  EXPECT_EQ(find(*a, other_uid.pid())->uid, 4321u);
  EXPECT_EQ(find(*a, zombie.pid())->state, 'Z');
}

std::optional<StatInfo> proc_stat(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  return parse_stat(text);
}

// Stat's fields 48-51 (arg_start, arg_end, env_start, env_end), read with
// plain syscalls and no allocation: forked children call it too.
std::optional<MemoryAreas> stat_areas(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = ::open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return std::nullopt;
  char text[2048];
  const ssize_t n = ::read(fd, text, sizeof text - 1);
  ::close(fd);
  if (n <= 0) return std::nullopt;
  text[n] = '\0';
  const char* p = std::strrchr(text, ')');
  if (p == nullptr) return std::nullopt;
  std::uint64_t field[52] = {};
  for (int i = 3; i <= 51; ++i) {  // field 3 is the state letter
    while (*p != '\0' && *p != ' ') ++p;
    while (*p == ' ') ++p;
    if (*p == '\0') return std::nullopt;
    field[i] = std::strtoull(p, nullptr, 10);
  }
  return MemoryAreas{field[48], field[49], field[50], field[51]};
}

TEST(KernelFds, TaskIteratorGivesWhatStatGives) {
  // Processes whose stat cannot change while the test looks: a session
  // leader, a group leader, a stopped one with a comm that has spaces and
  // parentheses, a zombie. The task iterator's fields must be /proc/PID/stat's,
  // so the scan may skip that file. A kernel thread's name there can be
  // longer than comm ("kworker/R-rcu_gp"): the task says where to read it.
  Pipes p1, p2, p3;
  Child leader = spawn_ready(p1, [] { (void)::setsid(); });
  Child group = spawn_ready(p2, [] { (void)::setpgid(0, 0); });
  Child stopped = spawn_ready(p3, [] { (void)::prctl(PR_SET_NAME, "a (b) c)"); });
  ASSERT_TRUE(leader.started() && group.started() && stopped.started());
  ASSERT_EQ(::kill(stopped.pid(), SIGSTOP), 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(stopped.pid()), &info, WSTOPPED | WNOWAIT), 0);
  pid_t z = ::fork();
  if (z == 0) ::_exit(0);
  ASSERT_GT(z, 0);
  Child zombie(z);
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(z), &info, WEXITED | WNOWAIT), 0);
  pid_t kthread = 0;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    auto st = proc_stat(std::stoi(name));
    if (st && st->kernel_thread()) {
      kthread = st->pid;
      break;
    }
  }

  auto k = read_kernel_fds(slash(), DeviceMatcher{});
  ASSERT_TRUE(k.ok()) << k.error().message;
  EXPECT_EQ(k->tasks_note, "");
  std::vector<pid_t> pids = {leader.pid(), group.pid(), stopped.pid(), zombie.pid(), ::getpid()};
  if (kthread != 0) {
    const KernelTask* t = k->find_task(kthread);
    ASSERT_NE(t, nullptr);
    ASSERT_TRUE(t->stat.has_value());
    const auto want = proc_stat(kthread);
    ASSERT_TRUE(want.has_value());
    EXPECT_TRUE(t->stat->kernel_thread());
    EXPECT_EQ(t->stat->ppid, want->ppid);
    EXPECT_EQ(t->stat->start_time, want->start_time);
    const bool longer = (want->flags & 0x20) != 0 || want->comm.size() >= 15;  // PF_WQ_WORKER
    EXPECT_EQ(t->name_from_proc, longer) << want->comm;
    if (!longer) {
      EXPECT_EQ(t->stat->comm, want->comm);
    }
  }
  for (pid_t pid : pids) {
    const KernelTask* t = k->find_task(pid);
    ASSERT_NE(t, nullptr) << pid;
    ASSERT_TRUE(t->stat.has_value()) << pid;
    auto want = proc_stat(pid);
    ASSERT_TRUE(want.has_value()) << pid;
    const StatInfo& got = *t->stat;
    EXPECT_EQ(got.pid, want->pid);
    EXPECT_EQ(got.comm, want->comm) << pid;
    if (pid != ::getpid()) {  // we run: R now, S then
      EXPECT_EQ(got.state, want->state) << pid;
    }
    EXPECT_EQ(got.ppid, want->ppid) << pid;
    EXPECT_EQ(got.pgrp, want->pgrp) << pid;
    EXPECT_EQ(got.session, want->session) << pid;
    EXPECT_EQ(got.kernel_thread(), want->kernel_thread()) << pid;
    EXPECT_EQ(got.start_time, want->start_time) << pid;
  }
  EXPECT_EQ(k->find_task(leader.pid())->stat->session, leader.pid());
  EXPECT_EQ(k->find_task(group.pid())->stat->pgrp, group.pid());
  EXPECT_EQ(k->find_task(stopped.pid())->stat->state, 'T');
  EXPECT_EQ(k->find_task(stopped.pid())->stat->comm, "a (b) c)");
  EXPECT_EQ(k->find_task(zombie.pid())->stat->state, 'Z');
  EXPECT_EQ(k->find_task(zombie.pid())->stat->ppid, ::getpid());
  // Where argv and the environment lie: stat's fields 48-51.
  for (pid_t pid : {leader.pid(), group.pid(), stopped.pid(), ::getpid()}) {
    const auto want = stat_areas(pid);
    ASSERT_TRUE(want.has_value()) << pid;
    EXPECT_GT(want->arg_end, want->arg_start) << pid;
    EXPECT_EQ(k->find_task(pid)->areas, want) << pid;
  }
  EXPECT_FALSE(k->find_task(zombie.pid())->areas.has_value());  // no memory left
  if (kthread != 0) {
    EXPECT_FALSE(k->find_task(kthread)->areas.has_value());
  }
}

namespace {

// Reads the file whole (cmdline, environ), "" when it cannot.
std::string proc_file(pid_t pid, const char* name) {
  auto text = slash().read_file("proc/" + std::to_string(pid) + "/" + name);
  return text ? *text : std::string();
}

// A child that holds `dev` and has its own argv and environment (exec'd bash).
Child spawn_holder_with_env(Pipes& pipes, const std::string& dev, const char* marker) {
  return spawn_ready(pipes, [&] {
    const std::string redirect = "exec 7<" + dev + "; printf r >&100; read -r x <&101";
    const char* env[] = {"CUDA_VISIBLE_DEVICES=3", "LOCAL_RANK=1", "PATH=/usr/bin:/bin", nullptr};
    ::execle("/bin/bash", "bash", "-c", redirect.c_str(), marker, static_cast<char*>(nullptr), env);
    ::_exit(127);
  });
}

// A forked child that holds `dev` and rewrites its argument area as
// setproctitle(3) does: the last byte is no longer the terminating NUL, and
// /proc/PID/cmdline then reads on into the environment.
Child spawn_retitled_holder(Pipes& pipes, const std::string& dev) {
  return spawn_ready(pipes, [&] {
    ::open(dev.c_str(), O_RDONLY);
    auto a = stat_areas(::getpid());
    if (!a || a->arg_end <= a->arg_start) ::_exit(1);
    // NOLINTNEXTLINE(performance-no-int-to-ptr): our own argument area
    std::memset(reinterpret_cast<char*>(a->arg_start), 'x', a->arg_end - a->arg_start);
  });
}

}  // namespace

TEST(KernelFds, ArgvAndEnvironmentCopiedFromMemoryAreWhatTheFilesSay) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  const auto dev_node = sim_device_file("nvidia0", dev);
  ASSERT_TRUE(dev_node.has_value());
  Pipes p1, p2;
  Child holder = spawn_holder_with_env(p1, dev, "marker-env");
  Child retitled = spawn_retitled_holder(p2, dev);
  ASSERT_TRUE(holder.started() && retitled.started());
  after_this_clock_tick();

  DeviceMatcher m;
  m.nodes.push_back(*dev_node);
  auto root = slash();
  // The copy itself: the two files' bytes, one after the other.
  auto k = read_kernel_fds(root, m);
  ASSERT_TRUE(k.ok()) << k.error().message;
  ASSERT_NE(k->find_task(holder.pid()), nullptr);
  ASSERT_TRUE(k->find_task(holder.pid())->areas.has_value());
  std::string copied;
  EXPECT_EQ(copy_areas(holder.pid(), *k->find_task(holder.pid())->areas, true, true, copied),
            AreaCopy::copied);
  EXPECT_EQ(copied, proc_file(holder.pid(), "cmdline") + proc_file(holder.pid(), "environ"));
  EXPECT_EQ(copy_areas(holder.pid(), *k->find_task(holder.pid())->areas, false, true, copied),
            AreaCopy::copied);
  EXPECT_EQ(copied, proc_file(holder.pid(), "environ"));
  MemoryAreas unmapped{4096, 8192, 8192, 8192};  // the first pages are never mapped
  EXPECT_EQ(copy_areas(holder.pid(), unmapped, true, true, copied), AreaCopy::unavailable);
  EXPECT_EQ(copy_areas(holder.pid(), MemoryAreas{8192, 4096, 0, 0}, true, true, copied),
            AreaCopy::unavailable);

  // The retitled one's file is not its argument area cut into strings.
  const auto retitled_areas = stat_areas(retitled.pid());
  ASSERT_TRUE(retitled_areas.has_value());
  const std::vector<std::string> retitled_cmdline =
      parse_cmdline(proc_file(retitled.pid(), "cmdline")).strings();
  EXPECT_NE(retitled_cmdline, (std::vector<std::string>{std::string(
                                  retitled_areas->arg_end - retitled_areas->arg_start, 'x')}));

  ScanOptions opts;
  opts.devices = &m;
  opts.fd_source = FdSource::kernel;
  opts.env_keys = {"CUDA_VISIBLE_DEVICES", "LOCAL_RANK"};
  const std::vector<std::pair<std::string, std::string>> want_env = {{"CUDA_VISIBLE_DEVICES", "3"},
                                                                     {"LOCAL_RANK", "1"}};
  for (unsigned threads : {1u, 4u}) {
    opts.threads = threads;
    auto t = scan_processes(root, opts);
    ASSERT_TRUE(t.ok()) << t.error().message;
    const Process* h = find(*t, holder.pid());
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(h->cmdline, (std::vector<std::string>{
                              "bash", "-c", "exec 7<" + dev + "; printf r >&100; read -r x <&101",
                              "marker-env"}));
    EXPECT_EQ(h->env, want_env) << threads;
    const Process* r = find(*t, retitled.pid());
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(r->cmdline, retitled_cmdline) << threads;
  }

  // Where process_vm_readv is refused (seccomp here; a security module or
  // the ptrace policy on a node), the files answer the same.
  int out[2];
  ASSERT_EQ(::pipe2(out, O_CLOEXEC), 0);
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(out[0]);
    sock_filter filter[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_process_vm_readv, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (EPERM & SECCOMP_RET_DATA)),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    sock_fprog prog{static_cast<unsigned short>(std::size(filter)), filter};
    if (::prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        ::prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0) {
      ::_exit(2);
    }
    std::string report;
    std::string scratch;
    const auto* task = k->find_task(holder.pid());
    report += copy_areas(holder.pid(), *task->areas, true, true, scratch) == AreaCopy::refused
                  ? "refused"
                  : "not refused";
    opts.threads = 1;
    auto t = scan_processes(root, opts);
    const Process* h = t ? find(*t, holder.pid()) : nullptr;
    const Process* r = t ? find(*t, retitled.pid()) : nullptr;
    if (h != nullptr && r != nullptr) {
      for (std::string_view a : h->cmdline) (report += '\n') += a;
      for (const auto& [key, value] : h->env) report += "\n" + key + "=" + value;
      for (std::string_view a : r->cmdline) (report += '\n') += a;
    }
    (void)!::write(out[1], report.data(), report.size());
    ::_exit(0);
  }
  ::close(out[1]);
  ASSERT_GT(pid, 0);
  Child scanner(pid);
  const std::string report = read_to_end(out[0]);
  std::string want = "refused\nbash\n-c\nexec 7<" + dev +
                     "; printf r >&100; read -r x <&101\nmarker-env" +
                     "\nCUDA_VISIBLE_DEVICES=3\nLOCAL_RANK=1";
  for (const auto& a : retitled_cmdline) want += "\n" + a;
  EXPECT_EQ(report, want);
}

// The direct-reads build copies each leader's argv itself, and a holder's
// environment where asked: what the files say, with no process_vm_readv.
// Not what it cannot copy whole: a rewritten argument area (the file reads on
// into the environment), or areas larger than its buffer; the scan copies or
// reads those, as it does for every process under the probe build.
TEST(KernelFds, TheIteratorCopiesArgvAndAHoldersEnvironmentItself) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  const auto dev_node = sim_device_file("nvidia0", dev);
  ASSERT_TRUE(dev_node.has_value());
  const std::string long_arg(GPUREAP_ARGS_BYTES + 100, 'a');
  Pipes p1, p2, p3, p4;
  Child holder = spawn_holder_with_env(p1, dev, "marker-env");
  Child retitled = spawn_retitled_holder(p2, dev);
  Child long_argv = spawn_holder_with_env(p3, dev, long_arg.c_str());
  Child plain = spawn_ready(p4, [] {  // the same environment, no GPU candidate
    const char* env[] = {"CUDA_VISIBLE_DEVICES=3", "LOCAL_RANK=1", nullptr};
    ::execle("/bin/bash", "bash", "-c", "printf r >&100; read -r x <&101", "plain",
             static_cast<char*>(nullptr), env);
    ::_exit(127);
  });
  ASSERT_TRUE(holder.started() && retitled.started() && long_argv.started() && plain.started());
  after_this_clock_tick();

  DeviceMatcher m;
  m.nodes.push_back(*dev_node);
  auto root = slash();
  const std::vector<std::string> keys = {"CUDA_VISIBLE_DEVICES", "LOCAL_RANK"};
  const std::vector<std::pair<std::string, std::string>> want_env = {{"CUDA_VISIBLE_DEVICES", "3"},
                                                                     {"LOCAL_RANK", "1"}};
  const bool copies = direct_reads_possible();
  auto argv_of = [](pid_t pid) { return parse_cmdline(proc_file(pid, "cmdline")); };
  for (unsigned shards : {1u, 4u}) {
    auto k = read_kernel_fds(root, m, nullptr, shards, {}, KernelReads::direct, keys);
    ASSERT_TRUE(k.ok()) << k.error().message;
    const KernelTask* h = k->find_task(holder.pid());
    const KernelTask* r = k->find_task(retitled.pid());
    const KernelTask* l = k->find_task(long_argv.pid());
    const KernelTask* q = k->find_task(plain.pid());
    ASSERT_TRUE(h != nullptr && r != nullptr && l != nullptr && q != nullptr);
    EXPECT_EQ(h->argv.has_value(), copies) << shards;
    EXPECT_EQ(h->env.has_value(), copies) << shards;
    EXPECT_EQ(q->argv.has_value(), copies) << shards;
    if (copies) {
      EXPECT_EQ(*h->argv, argv_of(holder.pid())) << shards;
      EXPECT_EQ(*h->env, want_env) << shards;
      EXPECT_EQ(*q->argv, argv_of(plain.pid())) << shards;
    }
    EXPECT_FALSE(q->env.has_value()) << shards;  // no candidate in its table
    EXPECT_FALSE(r->argv.has_value()) << shards;
    EXPECT_FALSE(l->argv.has_value()) << shards;
    EXPECT_FALSE(l->env.has_value()) << shards;
  }
  // Nothing copied by the probe build, no environment when none is asked for.
  auto probe = read_kernel_fds(root, m, nullptr, 1, {}, KernelReads::probe, keys);
  ASSERT_TRUE(probe.ok()) << probe.error().message;
  ASSERT_NE(probe->find_task(holder.pid()), nullptr);
  EXPECT_FALSE(probe->find_task(holder.pid())->argv.has_value());
  EXPECT_FALSE(probe->find_task(holder.pid())->env.has_value());
  KernelPrograms kept;
  auto with_env = read_kernel_fds(root, m, &kept, 1, {}, KernelReads::direct, keys);
  auto without = read_kernel_fds(root, m, &kept, 1, {}, KernelReads::direct, {});
  ASSERT_TRUE(with_env.ok() && without.ok());
  EXPECT_EQ(kept.loads, 2U);  // kept programs copy environments or not as they loaded
  ASSERT_NE(without->find_task(holder.pid()), nullptr);
  EXPECT_EQ(without->find_task(holder.pid())->argv.has_value(), copies);
  EXPECT_FALSE(without->find_task(holder.pid())->env.has_value());

  // The scan gives every one what the files say, copied by whichever.
  ScanOptions opts;
  opts.devices = &m;
  opts.fd_source = FdSource::kernel;
  opts.env_keys = keys;
  for (unsigned threads : {1u, 4u}) {
    opts.threads = threads;
    auto t = scan_processes(root, opts);
    ASSERT_TRUE(t.ok()) << t.error().message;
    for (pid_t pid : {holder.pid(), retitled.pid(), long_argv.pid(), plain.pid()}) {
      const Process* p = find(*t, pid);
      ASSERT_NE(p, nullptr) << pid;
      EXPECT_EQ(p->cmdline, argv_of(pid)) << pid << " on " << threads;
      if (pid == plain.pid()) {
        EXPECT_TRUE(p->env.empty()) << threads;  // not a GPU user: not asked
      } else if (pid != retitled.pid()) {
        // The retitled one is forked from this test, with its environment.
        EXPECT_EQ(p->env, want_env) << pid << " on " << threads;
      }
    }
  }
}

// Every kernel thread's name, as /proc/PID/comm gives it, by pid.
std::map<pid_t, std::string> kernel_thread_names() {
  std::map<pid_t, std::string> names;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const auto st = proc_stat(std::stoi(name));
    if (!st || !st->kernel_thread()) continue;
    std::string comm = proc_file(st->pid, "comm");
    if (!comm.empty() && comm.back() == '\n') comm.pop_back();
    names.emplace(st->pid, std::move(comm));
  }
  return names;
}

// A kernel thread's name as /proc gives it (fs/proc/array.c proc_task_name):
// a workqueue worker's with its work ("kworker/0:1-events"), one longer than
// comm whole ("rcu_exp_par_gp_kthread_worker/0"), a rescuer's by its
// workqueue ("kworker/R-kvfree_rcu_reclaim"), the rest their comm. The
// iterator's kthread records give the first three. Workers rename as they
// work: the scan is asked again until the names read before and after it
// agree, and where only a worker differs (it may have run other work during
// the scan and come back: seen once in some 40 runs), until the last attempt.
TEST(KernelFds, TheScanNamesKernelThreadsAsProcDoes) {
  auto root = slash();
  ScanOptions opts;
  opts.fd_source = FdSource::kernel;
  constexpr int kAttempts = 50;
  bool compared = false;
  for (int attempt = 0; attempt < kAttempts && !compared; ++attempt) {
    const auto before = kernel_thread_names();
    auto t = scan_processes(root, opts);
    const auto after = kernel_thread_names();
    ASSERT_TRUE(t.ok()) << t.error().message;
    ASSERT_EQ(t->stats.fds_from, "bpf");
    if (before != after) continue;
    const bool last = attempt + 1 == kAttempts;
    bool worker_moved = false;
    for (const auto& [pid, name] : before) {
      const Process* p = find(*t, pid);
      ASSERT_NE(p, nullptr) << pid << " " << name;
      if (p->comm != name && name.rfind("kworker/", 0) == 0 && !last) worker_moved = true;
    }
    if (worker_moved) continue;
    std::size_t workers = 0;
    for (const auto& [pid, name] : before) {
      EXPECT_EQ(find(*t, pid)->comm, name) << pid;
      if (name.rfind("kworker/", 0) == 0) ++workers;
    }
    EXPECT_GT(workers, 0U) << "no workqueue worker compared";
    compared = true;
  }
  EXPECT_TRUE(compared) << "kernel thread names never held still across a scan";
}

// Neighbours with one environment (forked workers) share its parse; the
// reader compares each text with the one before, so a neighbour whose
// environment differs gets its own, also between two that are the same.
TEST(KernelFds, NeighboursWithOneEnvironmentShareItsParseAndOthersGetTheirOwn) {
  TempDir dir;
  ASSERT_FALSE(dir.path.empty());
  const std::string dev = (dir.path / "nvidia0").string();
  const auto dev_node = sim_device_file("nvidia0", dev);
  ASSERT_TRUE(dev_node.has_value());
  const std::vector<std::string> a = {"CUDA_VISIBLE_DEVICES=3", "LOCAL_RANK=1", "PATH=/bin"};
  const std::vector<std::string> b = {"CUDA_VISIBLE_DEVICES=5", "LOCAL_RANK=2", "PATH=/bin"};
  const std::vector<std::string> a_longer = {"CUDA_VISIBLE_DEVICES=3", "LOCAL_RANK=1",
                                             "PATH=/bin:/usr/bin"};
  const std::vector<std::vector<std::string>> envs = {a, a, b, a, a_longer};
  std::vector<Pipes> pipes(envs.size());
  std::vector<Child> holders;
  for (std::size_t i = 0; i < envs.size(); ++i) {
    holders.push_back(spawn_ready(pipes[i], [&] {
      const std::string redirect = "exec 7<" + dev + "; printf r >&100; read -r x <&101";
      std::vector<const char*> env;
      for (const auto& e : envs[i]) env.push_back(e.c_str());
      env.push_back(nullptr);
      ::execle("/bin/bash", "bash", "-c", redirect.c_str(), static_cast<char*>(nullptr),
               env.data());
      ::_exit(127);
    }));
    ASSERT_TRUE(holders.back().started()) << i;
  }
  after_this_clock_tick();

  DeviceMatcher m;
  m.nodes.push_back(*dev_node);
  const std::vector<std::string> keys = {"CUDA_VISIBLE_DEVICES", "LOCAL_RANK"};
  using Env = std::vector<std::pair<std::string, std::string>>;
  const Env want_a = {{"CUDA_VISIBLE_DEVICES", "3"}, {"LOCAL_RANK", "1"}};
  const Env want_b = {{"CUDA_VISIBLE_DEVICES", "5"}, {"LOCAL_RANK", "2"}};
  const std::vector<Env> want = {want_a, want_a, want_b, want_a, want_a};
  auto k = read_kernel_fds(slash(), m, nullptr, 1, {}, KernelReads::direct, keys);
  ASSERT_TRUE(k.ok()) << k.error().message;
  for (std::size_t i = 0; i < holders.size(); ++i) {
    const KernelTask* t = k->find_task(holders[i].pid());
    ASSERT_NE(t, nullptr) << i;
    ASSERT_EQ(t->env.has_value(), direct_reads_possible()) << i;
    if (t->env) {
      EXPECT_EQ(*t->env, want[i]) << i;
    }
  }
}

// The numeric entries of /proc now, sorted.
std::vector<pid_t> proc_listing() {
  std::vector<pid_t> pids;
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    pid_t pid = 0;
    auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), pid);
    if (ec == std::errc{} && end == name.data() + name.size()) pids.push_back(pid);
  }
  std::sort(pids.begin(), pids.end());
  return pids;
}

// The pids both listings had (sorted, as proc_listing gives them) that
// `leaders` (sorted) lacks.
std::vector<pid_t> listed_throughout_but_missed(const std::vector<pid_t>& before,
                                                const std::vector<pid_t>& after,
                                                const std::vector<pid_t>& leaders) {
  std::vector<pid_t> throughout;
  std::set_intersection(before.begin(), before.end(), after.begin(), after.end(),
                        std::back_inserter(throughout));
  std::vector<pid_t> missed;
  std::set_difference(throughout.begin(), throughout.end(), leaders.begin(), leaders.end(),
                      std::back_inserter(missed));
  return missed;
}

// Where the task pass saw every task the kernel counted, its leaders are the
// processes /proc lists: every one listed before and after it is among them
// (others may come and go meanwhile: the test suite runs in parallel, so the
// pass is asked again until one sees a quiet moment). PID 1 is one of them
// also where the iterator does not show it (the lent 6.18 machines).
TEST(KernelFds, ATaskPassThatSawEveryTaskStandsForTheListing) {
  Pipes pipes;
  Child child = spawn_fdless(pipes);
  ASSERT_TRUE(child.started());
  auto root = slash();
  DeviceMatcher none;
  bool saw = false;
  for (int attempt = 0; attempt < 200 && !saw; ++attempt) {
    const std::vector<pid_t> before = proc_listing();
    auto k = read_kernel_fds(root, none);
    const std::vector<pid_t> after = proc_listing();
    ASSERT_TRUE(k.ok()) << k.error().message;
    if (!k->saw_every_task) {
      EXPECT_TRUE(k->leaders.empty());
      continue;
    }
    saw = true;
    EXPECT_TRUE(std::is_sorted(k->leaders.begin(), k->leaders.end()));
    EXPECT_EQ(std::adjacent_find(k->leaders.begin(), k->leaders.end()), k->leaders.end());
    const std::vector<pid_t> missed = listed_throughout_but_missed(before, after, k->leaders);
    EXPECT_TRUE(missed.empty()) << missed.size() << " listed processes missed, first "
                                << missed.front();
    EXPECT_TRUE(std::binary_search(k->leaders.begin(), k->leaders.end(), 1));
    EXPECT_TRUE(std::binary_search(k->leaders.begin(), k->leaders.end(), child.pid()));
  }
  EXPECT_TRUE(saw) << "no task pass in 200 saw every task";
  // The scan, whichever listed, has PID 1 and the child.
  ScanOptions opts;
  opts.fd_source = FdSource::kernel;
  auto t = scan_processes(root, opts);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_NE(find(*t, 1), nullptr);
  EXPECT_NE(find(*t, child.pid()), nullptr);
}

// The pass read_kernel_fds runs again where the walk's count moved: the
// css_set program alone, its leaders standing for the listing in a quiet
// moment (every process listed before and after it is among them, PID 1 and
// the child too), nothing where it cannot run.
TEST(KernelFds, ALeadersPassStandsForTheListingInAQuietMoment) {
  Pipes pipes;
  Child child = spawn_fdless(pipes);
  ASSERT_TRUE(child.started());
  auto root = slash();
  DeviceMatcher none;
  EXPECT_FALSE(kernel_leaders(root, KernelFdTable{}).has_value());
  auto k = read_kernel_fds(root, none);
  ASSERT_TRUE(k.ok()) << k.error().message;
  ASSERT_TRUE(k->tasks_program) << k->tasks_note;
  bool saw = false;
  for (int attempt = 0; attempt < 200 && !saw; ++attempt) {
    const std::vector<pid_t> before = proc_listing();
    auto leaders = kernel_leaders(root, *k);
    const std::vector<pid_t> after = proc_listing();
    if (!leaders) continue;
    saw = true;
    EXPECT_TRUE(std::is_sorted(leaders->begin(), leaders->end()));
    EXPECT_EQ(std::adjacent_find(leaders->begin(), leaders->end()), leaders->end());
    const std::vector<pid_t> missed = listed_throughout_but_missed(before, after, *leaders);
    EXPECT_TRUE(missed.empty()) << missed.size() << " listed processes missed, first "
                                << missed.front();
    // Nothing the listings never had, but what came and went between them: a
    // leader is a process, not one of its threads (which /proc does not list).
    std::vector<pid_t> either;
    std::set_union(before.begin(), before.end(), after.begin(), after.end(),
                   std::back_inserter(either));
    std::vector<pid_t> extra;
    std::set_difference(leaders->begin(), leaders->end(), either.begin(), either.end(),
                        std::back_inserter(extra));
    std::erase_if(extra, [](pid_t pid) { return ::kill(pid, 0) != 0 && errno == ESRCH; });
    EXPECT_TRUE(extra.empty()) << extra.size() << " live leaders never listed, first "
                               << extra.front();
    EXPECT_TRUE(std::binary_search(leaders->begin(), leaders->end(), 1));
    EXPECT_TRUE(std::binary_search(leaders->begin(), leaders->end(), child.pid()));
  }
  EXPECT_TRUE(saw) << "no leaders pass in 200 saw every task";
}

TEST(KernelFds, TheTaskCountAccountsForEveryTaskOrSendsTheScanToProc) {
  int asked = 0;
  auto pid1_threads = [&asked](std::optional<unsigned> n) {
    return [&asked, n] {
      ++asked;
      return n;
    };
  };
  EXPECT_EQ(judge_task_count(100, 100, 100, true, pid1_threads(7)), TaskCount::all);
  EXPECT_EQ(judge_task_count(100, 100, 100, false, pid1_threads(7)), TaskCount::all);
  EXPECT_EQ(asked, 0);  // PID 1's status is read only where the count falls short
  // Tasks came or went meanwhile, or the count is unknown.
  EXPECT_EQ(judge_task_count(100, 101, 100, true, pid1_threads(7)), TaskCount::incomplete);
  EXPECT_EQ(judge_task_count(std::nullopt, 100, 100, true, pid1_threads(7)), TaskCount::incomplete);
  EXPECT_EQ(judge_task_count(100, std::nullopt, 100, true, pid1_threads(7)), TaskCount::incomplete);
  // Short: by PID 1's threads exactly, PID 1 not shown.
  EXPECT_EQ(judge_task_count(107, 107, 100, false, pid1_threads(7)), TaskCount::all_but_pid1);
  EXPECT_EQ(judge_task_count(107, 107, 100, true, pid1_threads(7)), TaskCount::incomplete);
  EXPECT_EQ(judge_task_count(108, 108, 100, false, pid1_threads(7)), TaskCount::incomplete);
  EXPECT_EQ(judge_task_count(107, 107, 100, false, pid1_threads(std::nullopt)),
            TaskCount::incomplete);
  EXPECT_EQ(judge_task_count(100, 100, 101, false, pid1_threads(0)), TaskCount::incomplete);
}

// Forked workers (no exec) have the test's own argv. Read in pid order, a
// worker after another shares its text: one allocation for all of them where
// the scan used to make one each. Only runs of neighbouring pids share, so
// some pair of 16 must (another process could take a pid between any two).
TEST(ScanReal, ForkedWorkersWithOneArgvShareItsText) {
  std::vector<Child> workers;
  for (int i = 0; i < 16; ++i) {
    pid_t pid = ::fork();
    if (pid == 0) {
      for (;;) ::pause();  // SIGKILLed by ~Child
    }
    ASSERT_GT(pid, 0);
    workers.emplace_back(pid);
  }
  after_this_clock_tick();
  auto root = slash();
  const std::string own = proc_file(::getpid(), "cmdline");
  for (FdSource source : {FdSource::procfs, FdSource::kernel}) {
    ScanOptions opts;
    opts.fd_source = source;
    auto t = scan_processes(root, opts);
    ASSERT_TRUE(t.ok()) << t.error().message;
    std::vector<const char*> texts;
    for (const Child& w : workers) {
      const Process* p = find(*t, w.pid());
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(p->cmdline.text(), own);
      texts.push_back(p->cmdline.text().data());
    }
    std::sort(texts.begin(), texts.end());
    EXPECT_NE(std::adjacent_find(texts.begin(), texts.end()), texts.end())
        << "no two workers share one argv text (" << (source == FdSource::kernel ? "bpf" : "procfs")
        << ")";
  }
}

// The process's own /proc/PID/cgroup, parsed as the scan parses it; empty once it is gone.
std::vector<CgroupLine> proc_cgroups(pid_t pid) {
  auto text = slash().read_file("proc/" + std::to_string(pid) + "/cgroup");
  return text ? distinct_cgroup_paths(parse_cgroup(*text)) : std::vector<CgroupLine>{};
}

TEST(KernelFds, CgroupsReadOncePerCssSetAreEachProcesssOwnFile) {
  // Processes in real nested cgroups (v2, and v1 memory where mounted): two
  // share every cgroup, one differs from them only on v1, two sit higher up,
  // and a zombie shares their css_set (the kernel shows it "/" on v1).
  // The scan reads /proc/PID/cgroup once per css_set the task iterator
  // gives; every process must still get exactly what its own file says.
  const auto v2 = testing::cgroup_v2_mount();
  const auto v1 = testing::cgroup_v1_memory_mount();
  if (!v2) GTEST_SKIP() << "no cgroup2 mount";
  const std::string base = "/gpureap-cset-" + testing::random_hex(8);
  testing::Cgroup deep(*v2, base + "/a/b/c");
  testing::Cgroup mid(*v2, base + "/a/b");
  testing::Cgroup top(*v2, base + "/a");
  std::optional<testing::Cgroup> mem;
  if (v1) mem.emplace(*v1, base + "/m");
  Pipes p1, p2, p3, p4, p5, p6;
  Child zombie = spawn_ready(p6, [] {});
  Child same1 = spawn_ready(p1, [] {});
  Child same2 = spawn_ready(p2, [] {});
  Child v1_apart = spawn_ready(p3, [] {});
  Child in_mid = spawn_ready(p4, [] {});
  Child moving = spawn_ready(p5, [] {});
  ASSERT_TRUE(same1.started() && same2.started() && v1_apart.started() && in_mid.started() && moving.started());
  for (const Child* c : {&same1, &same2, &v1_apart, &zombie}) deep.add(c->pid());
  if (mem) mem->add(v1_apart.pid());
  ASSERT_EQ(::kill(zombie.pid(), SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(zombie.pid()), &info, WEXITED | WNOWAIT), 0);
  mid.add(in_mid.pid());
  top.add(moving.pid());

  auto k = read_kernel_fds(slash(), DeviceMatcher{});
  ASSERT_TRUE(k.ok()) << k.error().message;
  auto css = [&](pid_t pid) {
    const KernelTask* t = k->find_task(pid);
    return t != nullptr ? t->css_set : 0;
  };
  ASSERT_NE(css(same1.pid()), 0u);
  EXPECT_EQ(css(same1.pid()), css(same2.pid()));
  EXPECT_NE(css(same1.pid()), css(in_mid.pid()));
  EXPECT_NE(css(in_mid.pid()), css(moving.pid()));
  EXPECT_EQ(css(zombie.pid()), 0u);  // exiting: reads its own file
  if (mem) {
    EXPECT_NE(css(same1.pid()), css(v1_apart.pid()));
  }
  // A move shows in the next iteration: what the scan's check after its reads relies on.
  mid.add(moving.pid());
  auto now = kernel_css_sets(*k);
  ASSERT_TRUE(now.ok()) << now.error().message;
  auto now_of = [&](pid_t pid) {
    auto it = std::lower_bound(now->begin(), now->end(), std::pair<pid_t, std::uint64_t>{pid, 0});
    return it != now->end() && it->first == pid ? it->second : 0;
  };
  EXPECT_EQ(now_of(moving.pid()), css(in_mid.pid()));
  EXPECT_EQ(now_of(same1.pid()), css(same1.pid()));
  // Asked alone, one iteration each over a process's threads (6.1+): the
  // same, and nothing for a process gone.
  pid_t gone = ::fork();
  if (gone == 0) ::_exit(0);
  ASSERT_GT(gone, 0);
  ASSERT_EQ(::waitpid(gone, nullptr, 0), gone);
  utsname u{};
  ASSERT_EQ(::uname(&u), 0);
  auto alone = kernel_css_sets_alone(*k, {moving.pid(), same1.pid(), gone});
  ASSERT_EQ(alone.ok(), kernel_release_at_least(u.release, 6, 1));
  if (alone.ok()) {
    const std::vector<std::pair<pid_t, std::uint64_t>> want = {{same1.pid(), css(same1.pid())},
                                                               {moving.pid(), css(in_mid.pid())}};
    auto sorted = want;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(*alone, sorted);
  }

  const std::vector<pid_t> ours = {same1.pid(), same2.pid(), v1_apart.pid(), in_mid.pid(), moving.pid(),
                                   zombie.pid(), ::getpid(), pid_t{1}};
  for (unsigned threads : {1u, 3u}) {
    std::vector<std::pair<pid_t, std::vector<CgroupLine>>> before_scan;
    for (const auto& e : fs::directory_iterator("/proc")) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      before_scan.emplace_back(std::stoi(name), proc_cgroups(std::stoi(name)));
    }
    ScanOptions opts;
    opts.fd_source = FdSource::kernel;
    opts.threads = threads;
    auto a = scan_processes(slash(), opts);
    ASSERT_TRUE(a.ok()) << a.error().message;
    for (pid_t pid : ours) {
      const Process* x = find(*a, pid);
      ASSERT_NE(x, nullptr) << pid;
      EXPECT_EQ(x->cgroups, proc_cgroups(pid)) << pid << " with " << threads << " threads";
    }
    ASSERT_FALSE(find(*a, same1.pid())->cgroups.empty());
    EXPECT_EQ(find(*a, same1.pid())->cgroups, find(*a, same2.pid())->cgroups);
    if (mem) {
      EXPECT_NE(find(*a, same1.pid())->cgroups, find(*a, v1_apart.pid())->cgroups);
    }
    const auto& live = find(*a, same1.pid())->cgroups;
    if (std::any_of(live.begin(), live.end(), [](const CgroupLine& l) { return l.hierarchy_id != 0 && l.path != "/"; })) {
      EXPECT_NE(live, find(*a, zombie.pid())->cgroups);  // "/" on v1, though one css_set
    }
    // Every other process too, where its file was the same before and after
    // the scan (this node's other tests move processes between cgroups).
    unsigned compared = 0, differ = 0;
    std::string which;
    auto text = [](const std::vector<CgroupLine>& lines) {
      std::string t;
      for (const auto& l : lines) t += std::to_string(l.hierarchy_id) + ":" + l.controllers + ":" + l.path + ";";
      return t;
    };
    for (const Process& x : a->processes) {
      auto own = proc_cgroups(x.pid);
      auto before = std::find_if(before_scan.begin(), before_scan.end(),
                                 [&](const auto& e) { return e.first == x.pid; });
      if (own.empty() || before == before_scan.end() || before->second != own) continue;  // gone or moved
      ++compared;
      if (x.cgroups == own) continue;
      ++differ;
      which += " " + std::to_string(x.pid) + " (" + x.comm + ": " + text(x.cgroups) + " vs " + text(own) + ")";
    }
    EXPECT_GT(compared, 5u);
    EXPECT_EQ(differ, 0u) << "of " << compared << ":" << which;
  }
}

TEST(KernelFds, StateLettersAreTheKernelsTaskStateIndex) {
  EXPECT_EQ(task_state_letter(0x0, 0), 'R');
  EXPECT_EQ(task_state_letter(0x1, 0), 'S');
  EXPECT_EQ(task_state_letter(0x2, 0), 'D');
  EXPECT_EQ(task_state_letter(0x4, 0), 'T');
  EXPECT_EQ(task_state_letter(0x8, 0), 't');
  EXPECT_EQ(task_state_letter(0x80, 0x10), 'X');  // TASK_DEAD | EXIT_DEAD
  EXPECT_EQ(task_state_letter(0x80, 0x20), 'Z');  // TASK_DEAD | EXIT_ZOMBIE
  EXPECT_EQ(task_state_letter(0x40, 0), 'P');
  EXPECT_EQ(task_state_letter(0x402, 0), 'I');     // TASK_IDLE
  EXPECT_EQ(task_state_letter(0x1000, 0), 'D');    // TASK_RTLOCK_WAIT
  EXPECT_EQ(task_state_letter(0x8000, 0), 'D');    // TASK_FROZEN
  EXPECT_EQ(task_state_letter(0x101, 0), 'S');     // TASK_WAKEKILL | TASK_INTERRUPTIBLE
  EXPECT_EQ(task_state_letter(0x102, 0), 'D');     // TASK_KILLABLE
  EXPECT_EQ(task_state_letter(0x104, 0), 'T');     // TASK_STOPPED
}

// What wq_worker_comm and get_kthread_comm would print, from a kthread
// record: names taken from captured /proc (kworker/0:0H-events_highpri,
// kworker/u8:4+events_unbound, kworker/R-kvfree_rcu_reclaim,
// rcu_exp_par_gp_kthread_worker/0).
TEST(KernelFds, KernelThreadRecordsNameThreadsAsProcDoes) {
  auto thread = [](std::string comm, std::uint32_t flags) {
    KernelTask t;
    t.tgid = 7;
    StatInfo st;
    st.comm = std::move(comm);
    st.flags = flags;
    t.stat = st;
    t.name_from_proc = true;
    return t;
  };
  auto record = [](std::uint32_t worker_ok, std::uint32_t current, std::string_view desc,
                   std::uint32_t full_name_ok, std::string_view full_name,
                   std::uint32_t rescuer_ok = 0) {
    gpureap_kthread_record r{};
    r.kind = GPUREAP_REC_KTHREAD;
    r.tgid = 7;
    r.worker_ok = worker_ok;
    r.current = current;
    r.full_name_ok = full_name_ok;
    r.rescuer_ok = rescuer_ok;
    desc.copy(r.desc, sizeof r.desc - 1);
    full_name.copy(r.full_name, sizeof r.full_name - 1);
    return r;
  };
  constexpr std::uint32_t kWorker = 0x00200020, kKthread = 0x00200000;
  auto idle = thread("kworker/0:0H", kWorker);
  name_kernel_thread(record(1, 0, "events_highpri", 0, ""), idle);
  EXPECT_EQ(idle.stat->comm, "kworker/0:0H-events_highpri");
  EXPECT_FALSE(idle.name_from_proc);

  auto busy = thread("kworker/u8:4", kWorker);
  name_kernel_thread(record(1, 1, "events_unbound", 0, ""), busy);
  EXPECT_EQ(busy.stat->comm, "kworker/u8:4+events_unbound");

  auto fresh = thread("kworker/3:1", kWorker);  // no work run yet: no description
  name_kernel_thread(record(1, 0, "", 0, ""), fresh);
  EXPECT_EQ(fresh.stat->comm, "kworker/3:1");
  EXPECT_FALSE(fresh.name_from_proc);

  // The longest: comm of 14 characters and a description of 31 (its 32 bytes).
  auto longest = thread("kworker/12:12H", kWorker);
  name_kernel_thread(record(1, 1, std::string(31, 'w'), 0, ""), longest);
  EXPECT_EQ(longest.stat->comm, "kworker/12:12H+" + std::string(31, 'w'));

  // A rescuer: its full name, "kworker/R-" and its workqueue's, which comm cuts.
  auto rescuer = thread("kworker/R-kvfre", kWorker);
  name_kernel_thread(record(0, 0, "", 1, "kworker/R-kvfree_rcu_reclaim", 1), rescuer);
  EXPECT_EQ(rescuer.stat->comm, "kworker/R-kvfree_rcu_reclaim");
  EXPECT_FALSE(rescuer.name_from_proc);

  // While it rescues it is in a pool, and its work is appended; /proc stops at 63 bytes.
  const std::string wq = "kworker/R-" + std::string(31, 'q');
  auto rescuing = thread("kworker/R-qqqqq", kWorker);
  name_kernel_thread(record(1, 1, std::string(31, 'd'), 1, wq, 1), rescuing);
  EXPECT_EQ(rescuing.stat->comm, (wq + "+" + std::string(31, 'd')).substr(0, 63));

  // A short one: comm is whole, and the kernel kept no full name.
  auto short_rescuer = thread("kworker/R-mld", kWorker);
  name_kernel_thread(record(0, 0, "", 1, "", 1), short_rescuer);
  EXPECT_EQ(short_rescuer.stat->comm, "kworker/R-mld");
  EXPECT_FALSE(short_rescuer.name_from_proc);

  // Older kernels gave a rescuer its workqueue's name as comm, shown as it is (cut or not).
  auto older = thread("kblockd", kWorker);
  name_kernel_thread(record(0, 0, "", 1, "", 1), older);
  EXPECT_EQ(older.stat->comm, "kblockd");
  EXPECT_FALSE(older.name_from_proc);
  auto older_cut = thread("ext4-rsv-conver", kWorker);
  name_kernel_thread(record(0, 0, "", 1, "ext4-rsv-conversion", 1), older_cut);
  EXPECT_EQ(older_cut.stat->comm, "ext4-rsv-conver");
  EXPECT_TRUE(older_cut.name_from_proc);

  // A worker whose comm fills its 15 characters ("kworker/u256:10"): /proc is asked.
  auto wide = thread("kworker/u256:10", kWorker);
  name_kernel_thread(record(1, 0, "events_unbound", 0, ""), wide);
  EXPECT_EQ(wide.stat->comm, "kworker/u256:10");
  EXPECT_TRUE(wide.name_from_proc);

  auto long_name = thread("rcu_exp_par_gp_", kKthread);
  name_kernel_thread(record(0, 0, "", 1, "rcu_exp_par_gp_kthread_worker/0"), long_name);
  EXPECT_EQ(long_name.stat->comm, "rcu_exp_par_gp_kthread_worker/0");
  EXPECT_FALSE(long_name.name_from_proc);

  // full_name unset: the kernel shows comm.
  auto exactly = thread("ksoftirqd/12345", kKthread);
  name_kernel_thread(record(0, 0, "", 1, ""), exactly);
  EXPECT_EQ(exactly.stat->comm, "ksoftirqd/12345");
  EXPECT_FALSE(exactly.name_from_proc);

  // Nothing read: left to /proc.
  auto unread = thread("irq/24-ACPI:Ged", kKthread);
  name_kernel_thread(record(0, 0, "", 0, ""), unread);
  EXPECT_EQ(unread.stat->comm, "irq/24-ACPI:Ged");
  EXPECT_TRUE(unread.name_from_proc);

  // A thread /proc names by comm anyway is left as it is.
  auto plain = thread("kthreadd", kKthread);
  plain.name_from_proc = false;
  name_kernel_thread(record(0, 0, "", 1, "something else"), plain);
  EXPECT_EQ(plain.stat->comm, "kthreadd");
}

TEST(KernelFds, RecordsMatchByInodeRdevOrMajor) {
  DeviceMatcher m;
  m.nodes.push_back(DeviceNode{"nvidia0", "/dev/nvidia0", makedev(195, 0), std::nullopt});
  m.nodes.push_back(DeviceNode{"sim", "/tmp/sim/dev/nvidia0", std::nullopt, FileId{makedev(0, 42), 7}});
  m.majors = {195, 510};
  auto rec = [](mode_t mode, dev_t rdev, dev_t dev, std::uint64_t ino) {
    return KernelFdRecord{static_cast<std::uint32_t>(mode), rdev, dev, ino};
  };
  EXPECT_EQ(match_kernel_fd(m, rec(S_IFCHR | 0666, makedev(195, 0), 5, 1)).node, 0);
  EXPECT_EQ(match_kernel_fd(m, rec(S_IFREG | 0644, 0, makedev(0, 42), 7)).node, 1);
  EXPECT_EQ(match_kernel_fd(m, rec(S_IFREG | 0644, 0, makedev(0, 42), 8)).node, -1);
  // A char device with another file's dev/ino is not that file.
  EXPECT_EQ(match_kernel_fd(m, rec(S_IFCHR | 0666, 0, makedev(0, 42), 7)).node, -1);
  auto uvm = match_kernel_fd(m, rec(S_IFCHR | 0666, makedev(510, 1), 5, 2));
  EXPECT_EQ(uvm.node, -1);
  ASSERT_TRUE(uvm.rdev.has_value());
  EXPECT_EQ(*uvm.rdev, makedev(510, 1));
  EXPECT_FALSE(match_kernel_fd(m, rec(S_IFCHR | 0666, makedev(1, 3), 5, 3)).rdev.has_value());
  // The kernel's dev_t is major << 20 | minor.
  EXPECT_EQ(user_dev_from_kernel((195U << 20) | 255U), makedev(195, 255));
  EXPECT_EQ(user_dev_from_kernel((510U << 20) | 0x12345U), makedev(510, 0x12345));
}

TEST(KernelFds, LookupsFromAHintFindWhatABinarySearchFinds) {
  KernelFdTable table;
  for (pid_t pid : {1, 2, 3, 10, 11, 12, 13, 14, 15, 16, 40, 41, 1000, 4000000}) {
    table.tasks.push_back(KernelTask{});
    table.tasks.back().tgid = pid;
    table.processes.push_back(KernelFdSummary{});
    table.processes.back().tgid = pid;
  }
  // Rising, with gaps wider than the few steps forward; then backwards, a
  // repeat, pids before the first and after the last, and a hint past the end.
  const std::vector<pid_t> asked = {1,       2,  5,  12, 16, 17, 40, 999,  4000000,
                                    4000001, 13, 13, 3,  0,  -1, 41, 1000, 2};
  std::size_t task_hint = 0;
  std::size_t fds_hint = 0;
  for (pid_t pid : asked) {
    SCOPED_TRACE(pid);
    EXPECT_EQ(table.find_task(pid, task_hint), table.find_task(pid));
    EXPECT_EQ(table.find(pid, fds_hint), table.find(pid));
  }
  std::size_t past = table.tasks.size() + 5;
  EXPECT_EQ(table.find_task(11, past), table.find_task(11));
  std::size_t none = 0;
  EXPECT_EQ(KernelFdTable{}.find_task(3, none), nullptr);
}

TEST(KernelFds, NeverMatchesTheTerminalsAndNullsEveryProcessHas) {
  DeviceMatcher m;
  m.majors = {1, 4, 5, 136};
  for (dev_t d : {makedev(1, 3), makedev(1, 8), makedev(1, 9), makedev(5, 0), makedev(5, 1), makedev(5, 2),
                  makedev(4, 1), makedev(136, 0)}) {
    EXPECT_FALSE(match_kernel_fd(m, KernelFdRecord{S_IFCHR | 0620, d, 5, 1}).rdev.has_value())
        << ::major(d) << ":" << ::minor(d);
  }
  EXPECT_TRUE(match_kernel_fd(m, KernelFdRecord{S_IFCHR | 0666, makedev(1, 7), 5, 1}).rdev.has_value());
}

TEST(KernelFds, ADeviceKnownOnlyByPathSendsTheScanToProcfs) {
  DeviceMatcher m;
  m.nodes.push_back(DeviceNode{"nvidia-uvm", "/dev/nvidia-uvm", std::nullopt, std::nullopt});
  EXPECT_NE(kernel_match_gap(m).find("nvidia-uvm"), std::string::npos);
  auto root = slash();
  auto k = read_kernel_fds(root, m);
  ASSERT_FALSE(k.ok());
  EXPECT_NE(k.error().message.find("known only by its path"), std::string::npos);
  ScanOptions opts;
  opts.devices = &m;
  auto t = scan_processes(root, opts);
  ASSERT_TRUE(t.ok()) << t.error().message;
  EXPECT_EQ(t->stats.fds_from, "procfs");
  EXPECT_NE(t->stats.fds_note.find("known only by its path"), std::string::npos);
  opts.fd_source = FdSource::kernel;
  EXPECT_FALSE(scan_processes(root, opts).ok());
}

TEST(KernelFds, DeclinesFromInsideAPidNamespace) {
  // The iterator walks its reader's PID namespace; from a child namespace it
  // would see only that one, so it must refuse (EXDEV) and let procfs answer.
  pid_t outer = ::fork();
  ASSERT_GE(outer, 0);
  if (outer == 0) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (::unshare(CLONE_NEWPID) != 0) ::_exit(10);
    pid_t inner = ::fork();
    if (inner < 0) ::_exit(11);
    if (inner == 0) {
      auto r = sys::HostRoot::open("/");
      if (!r) ::_exit(12);
      auto k = read_kernel_fds(*r, DeviceMatcher{});
      ::_exit(!k.ok() && k.error().code == EXDEV ? 0 : 13);
    }
    int st = 0;
    while (::waitpid(inner, &st, 0) < 0 && errno == EINTR) {
    }
    ::_exit(WIFEXITED(st) ? WEXITSTATUS(st) : 14);
  }
  Child guard(outer);  // killed and reaped even if the wait below fails
  int status = 0;
  ASSERT_EQ(::waitpid(outer, &status, 0), outer);
  (void)guard.release();
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}


class ScanFixtureTree : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path.empty());
    const fs::path proc = dir_.path / "proc";
    auto add = [&](const std::string& pid, const std::string& prefix) {
      write_file(proc / pid / "stat", fixture(prefix + ".stat"));
      write_file(proc / pid / "status", fixture(prefix + ".status"));
    };
    add("4702", "normal");
    write_file(proc / "4702" / "cmdline", fixture("normal.cmdline"));
    write_file(proc / "4702" / "cgroup", fixture("normal.cgroup"));
    write_file(proc / "4702" / "environ", fixture("normal.environ"));
    fs::create_directories(proc / "4702" / "fd");
    // Links to nodes that do not exist here: matched by path alone.
    fs::create_symlink("/dev/nvidia0", proc / "4702" / "fd" / "3");
    fs::create_symlink("/dev/nvidia0", proc / "4702" / "fd" / "4");
    fs::create_symlink("/dev/nvidiactl", proc / "4702" / "fd" / "5");
    fs::create_symlink("/var/log/x.log", proc / "4702" / "fd" / "6");
    fs::create_symlink("/dev/nvidia1", proc / "4702" / "fd" / "7");  // /dev/ but no such node: no match
    add("4709", "paren_comm");                                       // no fd dir, no cmdline
    add("4790", "zombie");
    add("4599", "nspid");
    write_file(proc / "4599" / "cgroup", fixture("k8s_misconfigured.cgroup"));
    // Same environment, readable descriptors, no GPU: its environ is not read.
    write_file(proc / "4599" / "environ", fixture("normal.environ"));
    fs::create_directories(proc / "4599" / "fd");
    write_file(proc / "9997" / "stat", "garbage\n");  // malformed
    write_file(proc / "9997" / "status", "Tgid:\t9997\n");
    fs::create_directories(proc / "9998");  // listed, then gone: no stat
    write_file(proc / "9996" / "stat", fixture("normal.stat"));  // pid in stat differs from dir
    write_file(proc / "9996" / "status", fixture("normal.status"));
    write_file(proc / "9995" / "stat", "9995 (x) S 1 1 1 0 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 5 0\n");
    write_file(proc / "9995" / "status", "Name:\tx\nTgid:\t9995\n");  // cut before Uid
    write_file(proc / "self", "");                                      // non-numeric: not listed
    fs::create_directories(proc / "sys");
    fs::create_directories(proc / "01x");
    auto r = sys::HostRoot::open(dir_.path.string());
    ASSERT_TRUE(r.ok());
    root_.emplace(std::move(r).value());
  }
  TempDir dir_;
  std::optional<sys::HostRoot> root_;
};

TEST_F(ScanFixtureTree, CountsAndFields) {
  DeviceMatcher m;
  m.nodes.push_back(DeviceNode{"nvidia0", "/dev/nvidia0", makedev(195, 0), std::nullopt});
  m.nodes.push_back(DeviceNode{"nvidiactl", "/dev/nvidiactl", makedev(195, 255), std::nullopt});
  m.majors.push_back(195);
  for (unsigned threads : {1u, 3u}) {
    ScanOptions opts;
    opts.devices = &m;
    opts.env_keys = {"CUDA_VISIBLE_DEVICES"};
    opts.threads = threads;
    auto t = scan_processes(*root_, opts);
    ASSERT_TRUE(t.ok()) << t.error().message;
    // A fixture tree is no live kernel: the descriptor iterator declines and says why.
    auto stats = t->stats;
    EXPECT_NE(stats.fds_note.find("proc/self"), std::string::npos) << stats.fds_note;
    stats.fds_note.clear();
    EXPECT_EQ(stats, (ScanStats{.listed = 8,
                                .scanned = 4,
                                .vanished = 1,
                                .denied = 0,
                                .malformed = 3,
                                .fds_from = "procfs",
                                .fds_loader = "",
                                .fds_note = "",
                                .fds_pin = ""}))
        << "threads=" << threads;
    ASSERT_EQ(t->processes.size(), 4u);
    EXPECT_EQ(t->processes[0].pid, 4599);
    EXPECT_EQ(t->processes[1].pid, 4702);
    EXPECT_EQ(t->processes[2].pid, 4709);
    EXPECT_EQ(t->processes[3].pid, 4790);

    const Process& ns = t->processes[0];
    EXPECT_EQ(ns.local_pid(), 1);
    ASSERT_EQ(ns.cgroups.size(), 1u);
    EXPECT_NE(ns.cgroups[0].path.find(":cri-containerd:"), std::string::npos);

    ASSERT_EQ(t->processes[0].pid, 4599);
    EXPECT_TRUE(t->processes[0].fds_readable);
    EXPECT_TRUE(t->processes[0].env.empty());  // not a GPU user: environ not read

    const Process& n = t->processes[1];
    EXPECT_EQ(n.comm, "sleep");
    EXPECT_EQ(n.state, 'S');
    EXPECT_EQ(n.ppid, 4695);
    EXPECT_EQ(n.pgrp, 4695);
    EXPECT_EQ(n.session, 2731);
    EXPECT_EQ(n.start_time, 27369u);
    EXPECT_EQ(n.cmdline, (std::vector<std::string>{"sleep", "300"}));
    // Ten captured lines, eight of them "/": the scan keeps the first "/" line,
    // the memory line and the v2 line (distinct_cgroup_paths).
    ASSERT_EQ(n.cgroups.size(), 3u);
    EXPECT_EQ(n.cgroups[0].controllers, "name=systemd");
    EXPECT_EQ(n.cgroups[1].path, "/process_api/e30ec21447cf53c91bd92ba77df1752c");
    EXPECT_EQ(n.cgroups[2].hierarchy_id, 0u);
    EXPECT_EQ(n.env, (std::vector<std::pair<std::string, std::string>>{{"CUDA_VISIBLE_DEVICES", "0,1"}}));
    EXPECT_TRUE(n.fds_readable);
    EXPECT_EQ(n.fd_count, 5u);
    EXPECT_EQ(n.gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 2}, {"nvidiactl", 1}}));
    // The descriptors kcmp will compare, by number (the fixture's fd/ links).
    EXPECT_EQ(n.gpu_fd_numbers.size(), 3u);
    EXPECT_TRUE(n.gpu_files.empty());

    const Process& pc = t->processes[2];
    EXPECT_EQ(pc.comm, "a) b");
    EXPECT_FALSE(pc.fds_readable);
    EXPECT_TRUE(pc.cmdline.empty());
    EXPECT_TRUE(pc.env.empty());  // no environ file: best effort

    EXPECT_TRUE(t->processes[3].zombie());
  }
}

TEST_F(ScanFixtureTree, AskingForTheKernelIteratorOnAFixtureTreeFails) {
  ScanOptions opts;
  opts.fd_source = FdSource::kernel;
  auto t = scan_processes(*root_, opts);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.error().message.find("proc/self"), std::string::npos) << t.error().message;
}

TEST_F(ScanFixtureTree, ReadProcessErrors) {
  ScanOptions opts;
  auto gone = read_process(*root_, 9998, opts);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(gone.error().vanished());
  auto bad = read_process(*root_, 9997, opts);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, EBADMSG);
  EXPECT_NE(bad.error().message.find("9997"), std::string::npos);
  auto ok = read_process(*root_, 4702, opts);
  ASSERT_TRUE(ok.ok());
  EXPECT_TRUE(ok->env.empty());  // not asked for
}

TEST(ScanErrors, NoProcDirFails) {
  TempDir dir;
  auto r = sys::HostRoot::open(dir.path.string());
  ASSERT_TRUE(r.ok());
  auto t = scan_processes(*r, ScanOptions{});
  ASSERT_FALSE(t.ok());
  EXPECT_TRUE(t.error().vanished());
  EXPECT_NE(t.error().message.find("proc"), std::string::npos);
}

}  // namespace
}  // namespace gpureap::proc
