#include "proc/scan.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <system_error>
#include <thread>

#include "proc/kernel_fds.hpp"
#include "proc/parse.hpp"
#include "proc/process_memory.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::proc {
namespace {

enum class Outcome { ok, vanished, denied, malformed };

Outcome classify_errno(int err) {
  if (err == ENOENT || err == ESRCH) return Outcome::vanished;
  if (err == EACCES || err == EPERM) return Outcome::denied;
  return Outcome::malformed;  // ENOTDIR, EIO, ... on one pid: not a reason to stop
}

// Parses "<digits>" into a positive pid; anything else is not a process entry.
std::optional<pid_t> pid_from_name(const char* name) {
  pid_t v = 0;
  if (*name == '\0') return std::nullopt;
  for (const char* p = name; *p != '\0'; ++p) {
    if (*p < '0' || *p > '9') return std::nullopt;
    if (v > (0x7fffffff - 9) / 10) return std::nullopt;
    v = v * 10 + (*p - '0');
  }
  if (v <= 0) return std::nullopt;
  return v;
}

// Walks the entries of one getdents64 buffer. dirent64 is read field by field
// with memcpy: the kernel packs records at 8-byte steps, but we do not rely on it.
template <class Fn>
void for_each_dirent(const char* buf, std::size_t len, Fn&& fn) {
  std::size_t off = 0;
  while (off + offsetof(struct dirent64, d_name) < len) {
    unsigned short reclen = 0;
    std::memcpy(&reclen, buf + off + offsetof(struct dirent64, d_reclen), sizeof reclen);
    if (reclen == 0 || off + reclen > len) return;
    fn(buf + off + offsetof(struct dirent64, d_name));
    off += reclen;
  }
}

// Lists a procfs directory fd with getdents64; fn(name) per entry, "." and
// ".." skipped. Returns 0 or the errno of the failing call.
template <class Fn>
int list_dir(int dir_fd, std::vector<char>& buf, Fn&& fn) {
  // procfs fills the buffer until an entry does not fit: when room for the
  // largest possible entry is left, the listing is complete, and the final
  // empty getdents64 (one syscall per process) can be skipped.
  constexpr std::size_t kMaxEntry = offsetof(struct dirent64, d_name) + 256 + 8;
  for (;;) {
    ssize_t n = ::getdents64(dir_fd, buf.data(), buf.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return errno;
    }
    if (n == 0) return 0;
    for_each_dirent(buf.data(), static_cast<std::size_t>(n), [&](const char* name) {
      if (name[0] == '.' && (name[1] == '\0' || (name[1] == '.' && name[2] == '\0'))) return;
      fn(name);
    });
    if (buf.size() - static_cast<std::size_t>(n) >= kMaxEntry) return 0;
  }
}

// Character devices every process has and no GPU ever is: never worth a stat.
bool never_a_gpu(std::string_view path) {
  constexpr std::string_view kPaths[] = {"/dev/null", "/dev/urandom", "/dev/random", "/dev/ptmx", "/dev/console"};
  for (auto p : kPaths) {
    if (path == p) return true;
  }
  return path.substr(0, 9) == "/dev/pts/" || path.substr(0, 8) == "/dev/tty";
}

// Per-worker state: buffers reused across pids so the hot path does not allocate.
struct Reader {
  const sys::HostRoot& root;
  const ScanOptions& options;
  KernelFdTable* kernel = nullptr;  // the iterator's answer, when it ran; each entry is taken once
  std::size_t task_hint = 0;        // kernel's lookups, in the pid order this reader reads
  std::size_t fds_hint = 0;
  std::vector<char> dents;  // sized at the first /proc/PID/fd walk: a BPF scan may have none
  std::string text;
  std::vector<unsigned> node_counts;               // per matcher node, for the current process
  std::vector<std::pair<dev_t, unsigned>> by_major;  // devices known only by their major
  bool need_stat = false;  // some node has an rdev, or majors are given
  unsigned fds_denied = 0;  // processes whose descriptors were denied to us (ScanStats::fds_denied)
  // The host root's /proc, held open by scan_processes: paths below it walk
  // two components less per open than from the root (thousands per scan).
  // -1: paths start at the root.
  int proc_fd = -1;
  char path_buf[64] = {};

  // One /proc/PID/cgroup read per css_set the task iterator gave (take_cgroups).
  struct CgroupSeen {
    std::uint64_t css_set = 0;
    pid_t representative = 0;  // whose file it was: scan_processes checks it stayed
    CgroupLines lines;         // shared with every process that took them
  };
  std::vector<CgroupSeen> cgroups_seen;
  std::uint64_t shared_cgroup = 0;  // after read(): the css_set whose lines it took, 0: its own file

  Reader(const sys::HostRoot& r, const ScanOptions& o) : root(r), options(o) {
    if (o.devices != nullptr) {
      need_stat = !o.devices->majors.empty();
      for (const auto& n : o.devices->nodes) need_stat = need_stat || n.rdev.has_value();
    }
  }

  // Reads `name` under dir_fd into `text`. Returns 0 or errno. `short_is_eof`:
  // stat, status and cgroup are single seq_file records and the readers of
  // cmdline and environ loop until the buffer is full (or the memory cannot
  // be read, which the next read would hit again), so a short read there is
  // the end and the final empty read(2) can be saved.
  int read_into(int dir_fd, const char* name, bool short_is_eof = false) {
    int fd = ::openat(dir_fd, name, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return errno;
    sys::UniqueFd owned(fd);
    text.clear();
    std::size_t used = 0;
    for (;;) {
      if (text.size() - used < 4096) text.resize(used + 4096);
      ssize_t n = ::read(fd, text.data() + used, text.size() - used);
      if (n < 0) {
        if (errno == EINTR) continue;
        int err = errno;
        text.clear();
        return err;
      }
      if (n == 0) break;
      const bool short_read = static_cast<std::size_t>(n) < text.size() - used;
      used += static_cast<std::size_t>(n);
      if (short_is_eof && short_read) break;
    }
    text.resize(used);
    return 0;
  }

  // The argv this reader built last: forked workers sit at consecutive pids
  // with one argv (a server's, DataLoader's, torchrun's), and share one text.
  Argv last_cmdline;
  Argv cmdline_from(std::string_view arguments) {
    last_cmdline = parse_cmdline(arguments, last_cmdline);
    return last_cmdline;
  }

  // process_vm_readv was refused once (EPERM: a security module or the
  // ptrace policy; ENOSYS): the rest of this scan reads /proc, and a
  // refusal that is audited is audited once, not per process.
  bool memory_reads_refused = false;

  // argv and, when asked, the environment of a process the task iterator
  // described. Outcome::vanished when it is gone; the rest best effort.
  template <class PathOf>
  Outcome take_args(int dir, const PathOf& at, pid_t pid, const KernelTask& task, bool cmdline,
                    bool env, bool by_path, Process& p, std::string* why) {
    // What the iterator copied itself (the direct-reads build).
    if (task.argv) {
      p.cmdline = *task.argv;
      last_cmdline = p.cmdline;
      cmdline = false;
    }
    if (env && task.env) {
      p.env = *task.env;
      env = false;
    }
    if (task.areas && (cmdline || env) && !memory_reads_refused) {
      const AreaCopy c = copy_areas(pid, *task.areas, cmdline, env, text);
      memory_reads_refused = c == AreaCopy::refused;
      if (c == AreaCopy::copied) {
        const std::size_t arg_len = cmdline ? task.areas->arg_end - task.areas->arg_start : 0;
        const std::string_view copied(text);
        if (env) p.env = parse_environ(copied.substr(arg_len), options.env_keys);
        // An argument area whose last byte is not the terminating NUL was
        // rewritten (setproctitle): the file then reads on into the
        // environment (get_mm_proctitle), so it is asked.
        if (cmdline && (arg_len == 0 || copied[arg_len - 1] == '\0')) {
          p.cmdline = cmdline_from(copied.substr(0, arg_len));
          cmdline = false;
        }
        env = false;
      }
    }
    if (cmdline) {
      p.cmdline.clear();
      if (int err = read_into(dir, at("cmdline"), true); err == 0) {
        p.cmdline = cmdline_from(text);
      } else if (by_path && classify_errno(err) == Outcome::vanished) {
        if (why != nullptr)
          *why = "read proc/" + std::to_string(pid) + "/cmdline: " + std::strerror(err);
        return Outcome::vanished;
      }
    }
    if (env && read_into(dir, at("environ"), true) == 0)
      p.env = parse_environ(text, options.env_keys);
    return Outcome::ok;
  }

  // A parse failure on a process that is gone meanwhile is a vanish, not garbage.
  static Outcome gone_or_malformed(int pid_fd) {
    struct stat st {};
    if (::fstatat(pid_fd, "stat", &st, 0) != 0 && (errno == ENOENT || errno == ESRCH)) {
      return Outcome::vanished;
    }
    return Outcome::malformed;
  }

  void scan_fds(int pid_fd, Process& p) {
    int fd = ::openat(pid_fd, "fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) {  // fds_readable stays false
      if (errno == EACCES || errno == EPERM) ++fds_denied;
      return;
    }
    sys::UniqueFd fd_dir(fd);
    const DeviceMatcher* m = options.devices;
    const bool match = m != nullptr && !m->empty();
    node_counts.assign(match ? m->nodes.size() : 0, 0);  // reused: no allocation per process
    by_major.clear();
    unsigned count = 0;
    bool links_denied = false;
    char link[4096];
    if (dents.empty()) dents.resize(32768);
    int err = list_dir(fd, dents, [&](const char* name) {
      ++count;
      // Denied once, denied for every link: the check is the process's
      // (ptrace read access), not the descriptor's. Counted, not read.
      if (!match || links_denied) return;
      ssize_t n = ::readlinkat(fd, name, link, sizeof link);
      if (n < 0 && (errno == EACCES || errno == EPERM)) links_denied = true;
      if (n <= 0 || static_cast<std::size_t>(n) >= sizeof link) return;  // gone or cut: no match
      std::string_view target(link, static_cast<std::size_t>(n));
      // Which open file description it is, kcmp asks later by this number.
      auto matched = [&p, name] {
        int number = 0;
        const char* end = name + std::strlen(name);
        if (std::from_chars(name, end, number).ptr == end) p.gpu_fd_numbers.push_back(number);
      };
      for (std::size_t i = 0; i < m->nodes.size(); ++i) {
        if (target == m->nodes[i].path) {  // by path: counts even without rdev (simulated device)
          ++node_counts[i];
          matched();
          return;
        }
      }
      // stat only device paths: it is the expensive call, and only char devices matter.
      if (!need_stat || target.substr(0, 5) != "/dev/" || never_a_gpu(target)) return;
      struct stat st {};
      if (::fstatat(fd, name, &st, 0) != 0 || !S_ISCHR(st.st_mode)) return;
      for (std::size_t i = 0; i < m->nodes.size(); ++i) {
        if (m->nodes[i].rdev && *m->nodes[i].rdev == st.st_rdev) {
          ++node_counts[i];
          matched();
          return;
        }
      }
      unsigned maj = ::major(st.st_rdev);
      if (std::find(m->majors.begin(), m->majors.end(), maj) == m->majors.end()) return;
      matched();
      for (auto& [rdev, c] : by_major) {
        if (rdev == st.st_rdev) {
          ++c;
          return;
        }
      }
      by_major.emplace_back(st.st_rdev, 1);
    });
    if (err != 0) {  // a listing cut by exit or denial is not a reliable count
      p.gpu_fd_numbers.clear();
      return;
    }
    p.fd_count = count;
    // Listed but the links hidden (ptrace access check, e.g. another user
    // namespace): the count is right, a GPU match was impossible.
    p.fds_readable = !links_denied;
    if (links_denied) ++fds_denied;
    for (std::size_t i = 0; match && i < node_counts.size(); ++i) {
      if (node_counts[i] > 0) p.gpu_fds.push_back(DeviceUse{m->nodes[i].name, node_counts[i]});
    }
    std::sort(by_major.begin(), by_major.end());
    for (const auto& [rdev, c] : by_major) {
      p.gpu_fds.push_back(DeviceUse{
          "nvidia-" + std::to_string(::major(rdev)) + ":" + std::to_string(::minor(rdev)), c});
    }
  }

  // The iterator's counts where it saw this very process (same start time);
  // else the /proc walk: a process it missed is new since, a reused pid, one
  // without descriptors (3 syscalls to confirm), or one hidden from it.
  [[nodiscard]] KernelFdSummary* kernel_fds_of(const Process& p) {
    if (kernel == nullptr) return nullptr;
    KernelFdSummary* k = kernel->find(p.pid, fds_hint);
    if (k != nullptr && (k->start_ticks == p.start_time || k->start_ticks == 0) &&
        p.start_time < kernel->started_ticks) {
      return k;
    }
    return nullptr;
  }

  void take_fds(int pid_fd, Process& p) {
    if (KernelFdSummary* k = kernel_fds_of(p)) {
      p.fd_count = k->fd_count;
      p.fds_readable = true;
      p.gpu_fds = std::move(k->gpu_fds);
      p.gpu_files = std::move(k->gpu_files);
      p.gpu_fd_numbers = std::move(k->gpu_fd_numbers);
      return;
    }
    scan_fds(pid_fd, p);
  }

  // /proc/PID/cgroup, or what the read for another process with the same
  // css_set gave. The file is a function of the task's css_set (its cgroup on
  // every hierarchy, v1 and v2) and of the reader (its cgroup namespace, the
  // hierarchies mounted): one read per css_set the task iterator gave, not
  // one per process. `at("cgroup")` names it relative to `dir_fd`, made only
  // where the file is read.
  template <class PathOf>
  void take_cgroups(int dir_fd, const PathOf& at, const KernelTask* task, Process& p) {
    const std::uint64_t cset = task != nullptr && task->start_ticks == p.start_time ? task->css_set : 0;
    if (cset != 0) {
      for (const auto& e : cgroups_seen) {
        if (e.css_set != cset) continue;
        p.cgroups = e.lines;
        shared_cgroup = cset;
        return;
      }
    }
    if (read_into(dir_fd, at("cgroup"), true) != 0) return;
    p.cgroups = distinct_cgroup_paths(parse_cgroup(text));
    if (cset != 0) cgroups_seen.push_back(CgroupSeen{cset, p.pid, p.cgroups});
  }

  // Where proc_path is relative to: the held /proc, else the host root.
  [[nodiscard]] int proc_base() const { return proc_fd >= 0 ? proc_fd : root.dir_fd(); }

  // "PID/NAME" (or "PID") under proc_base(), for reads without the pid directory's fd.
  // Two per process: formatted by hand, snprintf's format parsing was ~5 %
  // of the scan's user time.
  const char* proc_path(pid_t pid, const char* name) {
    char* at = path_buf;
    char* const end = path_buf + sizeof path_buf - 1;
    if (proc_fd < 0) at = std::copy_n("proc/", 5, at);
    at = std::to_chars(at, end, pid).ptr;
    if (name[0] != '\0') {
      *at++ = '/';
      // Cannot be cut: the longest, "proc/" + a pid + "/" + a file name, fits.
      const std::size_t len =
          std::min<std::size_t>(std::strlen(name), static_cast<std::size_t>(end - at));
      at = std::copy_n(name, len, at);
    }
    *at = '\0';
    return path_buf;
  }

  // The environment is asked for to group GPU users (torch.distributed
  // ranks): read it only where descriptors show a GPU user, or could not be
  // read — 3 syscalls saved on every other process.
  [[nodiscard]] bool env_wanted(const Process& p) const {
    return !options.env_keys.empty() && (!options.read_fds || !p.fds_readable || !p.gpu_fds.empty());
  }

  // What stat holds, whoever read it (the file or the task iterator); comm is moved out.
  static void take_stat(pid_t pid, StatInfo& st, Process& p) {
    p.pid = pid;
    p.ppid = st.ppid;
    p.pgrp = st.pgrp;
    p.session = st.session;
    p.state = st.state;
    p.start_time = st.start_time;
    p.comm = std::move(st.comm);
  }

  // `cmdline_at`: the clock tick in which p.cmdline was read ahead (0: it was not).
  Outcome read(pid_t pid, Process& p, std::string* why, std::uint64_t cmdline_at = 0) {
    shared_cgroup = 0;
    // For messages only: made where one is written.
    auto path = [pid] { return "proc/" + std::to_string(pid); };
    const KernelTask* task = kernel != nullptr ? kernel->find_task(pid, task_hint) : nullptr;
    if (task != nullptr && task->stat) return read_known(pid, *task, p, why, cmdline_at);
    p.cmdline.clear();

    // Every file is opened relative to this one directory fd, not by path:
    // the fd stays bound to this process, so if the pid is reused mid-read
    // the opens fail (ENOENT) instead of mixing two processes in one entry.
    // O_PATH: it is only a base for openat, no open of its own.
    int pfd = ::openat(proc_base(), proc_path(pid, ""), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (pfd < 0) {
      int err = errno;
      if (why != nullptr) *why = "open " + path() + ": " + std::strerror(err);
      return classify_errno(err);
    }
    sys::UniqueFd pid_fd(pfd);

    // stat first: it carries the start time that identifies this process.
    if (int err = read_into(pfd, "stat", true); err != 0) {
      if (why != nullptr) *why = "read " + path() + "/stat: " + std::strerror(err);
      return classify_errno(err);
    }
    auto parsed = parse_stat(text);
    if (!parsed || parsed->pid != pid) {
      if (why != nullptr) *why = "unparsable " + path() + "/stat";
      return gone_or_malformed(pfd);
    }
    StatInfo st = std::move(*parsed);
    take_stat(pid, st, p);
    // The task iterator already read what status holds (tgid, uid, NSpid)
    // for this very process (same start time): 3 syscalls saved per process.
    if (task != nullptr && task->start_ticks == p.start_time && !p.comm.empty()) {
      p.tgid = pid;
      p.uid = task->uid;
      p.nspid.assign(task->nspid.begin(), task->nspid.begin() + task->levels);
    } else {
      if (int err = read_into(pfd, "status", true); err != 0) {
        if (why != nullptr) *why = "read " + path() + "/status: " + std::strerror(err);
        return classify_errno(err);
      }
      auto status = parse_status(text);
      // Tgid (thread → process) and the real uid are what callers act on: without them the entry is unusable.
      if (!status || !status->tgid || !status->uid) {
        if (why != nullptr) *why = "unparsable " + path() + "/status";
        return gone_or_malformed(pfd);
      }
      p.tgid = *status->tgid;
      p.uid = *status->uid;
      p.nspid = std::move(status->nspid);
      if (p.comm.empty() && status->name) p.comm = std::move(*status->name);
    }

    // Kernel threads have no argv, environment or descriptors: skip 6 syscalls
    // each (a 128-CPU GPU node runs over a thousand of them).
    auto by_name = [](const char* name) { return name; };
    if (st.kernel_thread()) {
      take_cgroups(pfd, by_name, task, p);
      p.fds_readable = options.read_fds;
      return Outcome::ok;
    }
    // The rest is best effort: a zombie has no cmdline, environ may be denied.
    if (read_into(pfd, "cmdline", true) == 0) p.cmdline = cmdline_from(text);
    take_cgroups(pfd, by_name, task, p);
    if (options.read_fds) take_fds(pfd, p);
    if (env_wanted(p) && read_into(pfd, "environ", true) == 0) p.env = parse_environ(text, options.env_keys);
    return Outcome::ok;
  }

  // A user process the task iterator described (what stat and status hold,
  // as the kernel computes them, moments ago): identity is then the kernel's
  // pid and start time, and acting on a process re-checks it (pidfd). What is
  // left is cmdline, the cgroup where no process of its css_set was read yet,
  // and for a GPU user its environment. Where the descriptor iterator saw it
  // too, these files are opened by path, with no directory fd (2 syscalls
  // saved per process): the same process unless the PID space wrapped since
  // the iterator ran, which the fields above already assume. A process that
  // iterator missed has its fd directory walked through a directory fd.
  Outcome read_known(pid_t pid, const KernelTask& task, Process& p, std::string* why,
                     std::uint64_t cmdline_at) {
    StatInfo st = *task.stat;
    const bool kernel_thread = st.kernel_thread();
    take_stat(pid, st, p);
    p.tgid = pid;
    p.uid = task.uid;
    p.nspid.assign(task.nspid.begin(), task.nspid.begin() + task.levels);
    if (kernel_thread) {
      // No argv, environment or descriptors; comm (by path: one open, a
      // cheaper file than stat) where /proc names it otherwise.
      if (task.name_from_proc) {
        if (int err = read_into(proc_base(), proc_path(pid, "comm"), true); err != 0) {
          if (why != nullptr)
            *why = "read proc/" + std::to_string(pid) + "/comm: " + std::strerror(err);
          return classify_errno(err);
        }
        if (!text.empty() && text.back() == '\n') text.pop_back();
        p.comm = text;
      }
      take_cgroups(
          proc_base(), [&](const char* name) { return proc_path(pid, name); }, &task, p);
      p.fds_readable = options.read_fds;
      return Outcome::ok;
    }

    int pfd = -1;
    sys::UniqueFd pid_fd;
    if (options.read_fds && kernel_fds_of(p) == nullptr) {
      pfd = ::openat(proc_base(), proc_path(pid, ""), O_PATH | O_DIRECTORY | O_CLOEXEC);
      if (pfd < 0) {
        int err = errno;
        if (why != nullptr) *why = "open proc/" + std::to_string(pid) + ": " + std::strerror(err);
        return classify_errno(err);
      }
      pid_fd = sys::UniqueFd(pfd);
    }
    auto at = [&](const char* name) { return pfd >= 0 ? name : proc_path(pid, name); };
    const int dir = pfd >= 0 ? pfd : proc_base();

    take_cgroups(dir, at, &task, p);
    if (options.read_fds) take_fds(pfd, p);
    // A cmdline read ahead (scan_processes) in a clock tick after this
    // process started was this process's: a pid names one live process at a
    // time, and this one lived from its start to the iterator. Else it is
    // read now, best effort as in read(); but gone is the process gone.
    const bool cmdline = cmdline_at == 0 || task.start_ticks >= cmdline_at;
    return take_args(dir, at, pid, task, cmdline, env_wanted(p), pfd < 0, p, why);
  }
};

void count(ScanStats& stats, Outcome o) {
  switch (o) {
    case Outcome::ok: ++stats.scanned; break;
    case Outcome::vanished: ++stats.vanished; break;
    case Outcome::denied: ++stats.denied; break;
    case Outcome::malformed: ++stats.malformed; break;
  }
}

// What one worker leaves for the cgroup check: whose file spoke for which
// css_set (per slot, the css_set whose lines it took, 0: its own file).
using CgroupsSeen = std::vector<std::pair<pid_t, std::uint64_t>>;

// Workers claim chunks of pids and write each process into its own slot:
// the table is built in pid order in place, with no per-worker vectors to
// grow and merge (a second copy of the table at the peak).
void scan_some(const sys::HostRoot& root, int proc_fd, const ScanOptions& options,
               KernelFdTable* kernel, const std::vector<pid_t>& pids,
               const std::vector<std::uint64_t>& cmdline_at, std::atomic<std::size_t>& next,
               std::vector<Process>& slots, std::vector<Outcome>& outcomes,
               std::vector<std::uint64_t>& shared, CgroupsSeen& seen, unsigned& fds_denied) {
  Reader reader(root, options);
  reader.kernel = kernel;
  reader.proc_fd = proc_fd;
  constexpr std::size_t kChunk = 32;  // small enough to balance, large enough to keep the atomic cold
  for (;;) {
    std::size_t begin = next.fetch_add(kChunk, std::memory_order_relaxed);
    if (begin >= pids.size()) break;
    std::size_t end = std::min(begin + kChunk, pids.size());
    for (std::size_t i = begin; i < end; ++i) {
      outcomes[i] = reader.read(pids[i], slots[i], nullptr, cmdline_at.empty() ? 0 : cmdline_at[i]);
      shared[i] = reader.shared_cgroup;
      if (outcomes[i] != Outcome::ok) slots[i] = Process{};  // drop what a failed read left
    }
  }
  for (const auto& e : reader.cgroups_seen) seen.emplace_back(e.representative, e.css_set);
  fds_denied = reader.fds_denied;
}

// A process's lines taken from another's file (its css_set's representative)
// are its cgroups as the task iterator saw it, where the representative was
// still in that css_set when its file was read: the two were in the one
// css_set object in the iterator, and a css_set's cgroups never change. The
// representative may have moved meanwhile (and the css_set it left be freed,
// its address reused), so each one is asked again after every read (alone,
// where they are few: kernel_css_sets): where it moved, or cannot be asked
// (gone, or the iterator fails), every process that took its lines reads
// its own file. A move away and back within these milliseconds is what this
// cannot see. A process that took the lines and moved since is, like every
// other field of the scan, described as the iterator saw it.
void check_shared_cgroups(const sys::HostRoot& root, const KernelFdTable& kernel, std::vector<Process>& slots,
                          const std::vector<Outcome>& outcomes, const std::vector<std::uint64_t>& shared,
                          const std::vector<CgroupsSeen>& seen) {
  if (std::all_of(shared.begin(), shared.end(), [](std::uint64_t id) { return id == 0; })) return;
  std::vector<pid_t> representatives;
  for (const auto& worker : seen) {
    for (const auto& entry : worker) representatives.push_back(entry.first);
  }
  auto now = kernel_css_sets(kernel, representatives);
  auto stayed = [&](pid_t pid, std::uint64_t css_set) {
    if (!now) return false;
    auto it = std::lower_bound(now->begin(), now->end(), std::pair<pid_t, std::uint64_t>{pid, 0});
    return it != now->end() && it->first == pid && it->second == css_set;
  };
  std::vector<std::uint64_t> moved;  // css_sets whose representative left: lines in doubt
  for (const auto& worker : seen) {
    for (const auto& [pid, css_set] : worker) {
      if (!stayed(pid, css_set)) moved.push_back(css_set);
    }
  }
  for (std::size_t i = 0; i < slots.size(); ++i) {
    if (outcomes[i] != Outcome::ok || shared[i] == 0) continue;
    Process& p = slots[i];
    if (std::find(moved.begin(), moved.end(), shared[i]) == moved.end()) continue;
    p.cgroups.clear();
    auto read = root.read_file("proc/" + std::to_string(p.pid) + "/cgroup");
    if (read) p.cgroups = distinct_cgroup_paths(parse_cgroup(*read));
  }
}

// The listing of /proc, and cmdlines read ahead into the slots by threads to
// spare while the BPF programs load (the verifier's milliseconds).
struct Listing {
  int proc_fd = -1;
  std::vector<pid_t> pids;  // sorted
  std::vector<Process> slots;
  // Per slot, the boot-time tick before its cmdline was read; 0: not read.
  std::vector<std::uint64_t> cmdline_at;
  int list_err = 0;
  std::atomic<int> listed{0};  // 1: the vectors above are ready; -1: listing failed
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> next{0};

  // Lists /proc and sizes the slots. Returns 0 or errno.
  int list() {
    std::vector<char> buf(32768);
    int err = list_dir(proc_fd, buf, [&](const char* name) {
      if (auto pid = pid_from_name(name)) pids.push_back(*pid);
    });
    if (err != 0) return err;
    std::sort(pids.begin(), pids.end());
    slots.resize(pids.size());
    return 0;
  }
};

// One thread to spare: the first lists /proc; then each reads cmdlines into
// their slots, in chunks, until every one is read or it is told to stop.
void list_and_read_ahead(const sys::HostRoot& root, const ScanOptions& options, Listing& l,
                         bool lists) {
  if (lists) {
    l.list_err = l.list();
    if (l.list_err == 0) l.cmdline_at.assign(l.pids.size(), 0);
    l.listed.store(l.list_err == 0 ? 1 : -1);
    l.listed.notify_all();
  } else {
    l.listed.wait(0);
  }
  if (l.listed.load() != 1) return;
  Reader reader(root, options);
  reader.proc_fd = l.proc_fd;
  constexpr std::size_t kChunk = 8;
  while (!l.stop.load(std::memory_order_relaxed)) {
    const std::size_t begin = l.next.fetch_add(kChunk, std::memory_order_relaxed);
    if (begin >= l.pids.size()) return;
    const std::size_t end = std::min(begin + kChunk, l.pids.size());
    for (std::size_t i = begin; i < end; ++i) {
      const std::uint64_t tick = boot_clock_ticks();
      if (reader.read_into(l.proc_fd, reader.proc_path(l.pids[i], "cmdline"), true) != 0) continue;
      l.slots[i].cmdline = reader.cmdline_from(reader.text);
      l.cmdline_at[i] = tick;
    }
  }
}

}  // namespace

sys::Result<ProcessTable> scan_processes(const sys::HostRoot& root, const ScanOptions& options) {
  int fd = ::openat(root.dir_fd(), "proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return sys::errno_error(errno, "open " + root.join("proc"));
  sys::UniqueFd proc_dir(fd);
  Listing listing;
  listing.proc_fd = fd;

  // Whichever runs first, the iterator or the listing: a listed process the
  // iterator did not see, or saw with another start time, or that started
  // after the iteration began (`started_ticks`), has its /proc walked
  // (take_fds). With threads to spare, they list /proc and read cmdlines
  // ahead while the programs load; the walk's threads then take the cores.
  std::optional<KernelFdTable> kernel;
  std::string fds_note;
  const bool from_kernel = options.read_fds && options.fd_source != FdSource::procfs;
  struct Spare {
    Listing& listing;
    std::vector<std::thread> threads;
    void stop() {
      listing.stop.store(true);
      for (auto& t : threads) t.join();
      threads.clear();
    }
    ~Spare() { stop(); }  // also on an early return
  } spare{listing, {}};
  if (from_kernel && options.threads > 1) {
    for (unsigned t = 0; t + 1 < options.threads; ++t) {
      try {
        spare.threads.emplace_back(list_and_read_ahead, std::cref(root), std::cref(options),
                                   std::ref(listing), t == 0);
      } catch (const std::system_error&) {  // fewer read ahead; none: listed below
        break;
      }
    }
  }
  if (from_kernel) {
    const DeviceMatcher no_devices;
    auto k = read_kernel_fds(
        root, options.devices != nullptr ? *options.devices : no_devices, options.kernel_programs,
        std::max(1u, options.threads), [&spare] { spare.stop(); }, options.kernel_reads,
        options.env_keys);
    if (k) {
      kernel = std::move(k.value());
      fds_note = std::move(kernel->loader_note);
    } else if (options.fd_source == FdSource::kernel) {
      return k.error();
    } else {
      fds_note = k.error().message;
    }
  }
  spare.stop();
  // No thread listed /proc: the task pass's leaders stand for the listing
  // where it saw every task the kernel counted (2 ms of getdents on 2,000
  // processes, each entry a dentry looked up), else /proc is listed now.
  if (listing.listed.load() == 0) {
    if (kernel && kernel->saw_every_task) {
      listing.pids = std::move(kernel->leaders);
      listing.slots.resize(listing.pids.size());
    } else {
      listing.list_err = listing.list();
    }
  }
  if (listing.list_err != 0) return sys::errno_error(listing.list_err, "list " + root.join("proc"));
  const std::vector<pid_t>& pids = listing.pids;

  ProcessTable table;
  table.stats.listed = static_cast<unsigned>(pids.size());
  if (options.read_fds) table.stats.fds_from = kernel ? "bpf" : "procfs";
  if (kernel) {
    table.stats.fds_loader = kernel->loader;
    table.stats.fds_pin = kernel->pin;
  }
  table.stats.fds_note = std::move(fds_note);
  KernelFdTable* kernel_table = kernel ? &*kernel : nullptr;
  unsigned nthreads = std::max(1u, options.threads);
  // No more workers than pids: an idle thread costs a clone for nothing.
  nthreads = static_cast<unsigned>(std::min<std::size_t>(nthreads, std::max<std::size_t>(1, pids.size())));
  std::vector<Process>& slots = listing.slots;
  std::vector<Outcome> outcomes(pids.size(), Outcome::malformed);
  std::vector<std::uint64_t> shared(pids.size(), 0);
  std::vector<CgroupsSeen> seen(nthreads);
  std::vector<unsigned> fds_denied(nthreads, 0);
  std::atomic<std::size_t> next{0};
  if (nthreads == 1) {
    scan_some(root, proc_dir.get(), options, kernel_table, pids, listing.cmdline_at, next, slots,
              outcomes, shared, seen[0], fds_denied[0]);
  } else {
    std::vector<std::thread> workers;
    workers.reserve(nthreads);
    for (unsigned t = 0; t < nthreads; ++t) {
      workers.emplace_back(scan_some, std::cref(root), proc_dir.get(), std::cref(options),
                           kernel_table, std::cref(pids), std::cref(listing.cmdline_at),
                           std::ref(next), std::ref(slots), std::ref(outcomes), std::ref(shared),
                           std::ref(seen[t]), std::ref(fds_denied[t]));
    }
    for (auto& w : workers) w.join();
  }
  for (unsigned n : fds_denied) table.stats.fds_denied += n;
  if (kernel_table != nullptr) check_shared_cgroups(root, *kernel_table, slots, outcomes, shared, seen);
  std::size_t kept = 0;
  for (std::size_t i = 0; i < slots.size(); ++i) {
    count(table.stats, outcomes[i]);
    if (outcomes[i] != Outcome::ok) continue;
    if (kept != i) slots[kept] = std::move(slots[i]);
    ++kept;
  }
  slots.resize(kept);
  table.processes = std::move(slots);
  return table;
}

sys::Result<Process> read_process(const sys::HostRoot& root, pid_t pid, const ScanOptions& options) {
  if (pid <= 0) return sys::Error{EINVAL, "read_process: pid " + std::to_string(pid)};
  Reader reader(root, options);
  std::string why;
  Process p;
  Outcome o = reader.read(pid, p, &why);
  // A thread id: describe its thread group, whose leader's start time is the identity.
  if (o == Outcome::ok && p.tgid != pid && p.tgid > 0) {
    pid_t leader = p.tgid;
    p = Process{};
    o = reader.read(leader, p, &why);
  }
  switch (o) {
    case Outcome::ok: return p;
    case Outcome::vanished: return sys::Error{ESRCH, why};
    case Outcome::denied: return sys::Error{EACCES, why};
    case Outcome::malformed: return sys::Error{EBADMSG, why};
  }
  return sys::Error{EBADMSG, why};
}

sys::Result<std::vector<std::string>> read_mapped_files(const sys::HostRoot& root, pid_t pid) {
  const std::string rel = "proc/" + std::to_string(pid) + "/maps";
  auto text = root.read_file(rel);
  if (!text) return text.error();
  return parse_mapped_files(*text);
}

}  // namespace gpureap::proc
