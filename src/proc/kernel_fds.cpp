#include "proc/kernel_fds.hpp"

#include <fcntl.h>
#include <linux/bpf.h>
#include <linux/types.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <cstddef>
#include <cstring>
#include <iterator>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>

#include "proc/bpf/kernel_scan_loaders.h"
#include "proc/bpf/records.h"
#include "proc/bpf_pins.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::proc {

// What loaded, owned: the table walk (scan, and its switch), or the
// task_file form (fds and tasks).
struct ScanPrograms {
  sys::UniqueFd scan;
  sys::UniqueFd data_map;
  sys::UniqueFd fds;
  sys::UniqueFd tasks;

  [[nodiscard]] bool walks() const { return scan.valid(); }
  // The program a scan iterates first: the walk, or the task_file iterator.
  [[nodiscard]] int first() const { return walks() ? scan.get() : fds.get(); }
  // Copies of the descriptors, the same programs; errno set when one failed.
  [[nodiscard]] std::optional<ScanPrograms> copy() const {
    auto dup_of = [](const sys::UniqueFd& fd) {
      return sys::UniqueFd(fd ? ::fcntl(fd.get(), F_DUPFD_CLOEXEC, 3) : -1);
    };
    ScanPrograms p{dup_of(scan), dup_of(data_map), dup_of(fds), dup_of(tasks)};
    if (p.scan.valid() != scan.valid() || p.data_map.valid() != data_map.valid() ||
        p.fds.valid() != fds.valid() || p.tasks.valid() != tasks.valid())
      return std::nullopt;
    return p;
  }
};

struct KernelPrograms::Kept {
  ScanPrograms programs;
  std::vector<std::uint64_t> key;  // walk_key of what they were loaded for
  std::string loader, fallback;
  sys::UniqueFd pin_lock;  // the pinned entry they came from or went to, locked
  // What a later scan of this process reports as scan.fds_pin: "reused
  // ENTRY" when pinned, else why not (empty without a pin directory).
  std::string pin_status;
};

namespace {

constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";
constexpr ino_t kInitPidNamespaceInode = 0xEFFFFFFCU;  // include/linux/proc_ns.h

using FdRecord = gpureap_fd_record;
using TableRecord = gpureap_table_record;
using TaskRecord = gpureap_task_record;
using EndRecord = gpureap_end_record;
using CssRecord = gpureap_css_record;
using ArgsRecord = gpureap_args_record;
using KthreadRecord = gpureap_kthread_record;
static_assert(sizeof(FdRecord) == 56 && sizeof(TableRecord) == 32 && sizeof(TaskRecord) == 144 &&
              sizeof(EndRecord) == 16 && sizeof(CssRecord) == 16 && sizeof(ArgsRecord) == 24 &&
              sizeof(KthreadRecord) == 120);
// One task's records never span two reads: they fit the iterator's buffer
// (8 pages) together, with the iteration's end.
static_assert(sizeof(TaskRecord) + sizeof(KthreadRecord) +
                  GPUREAP_MAX_CANDIDATES * sizeof(FdRecord) + sizeof(TableRecord) +
                  sizeof(ArgsRecord) + GPUREAP_ARGS_BYTES + sizeof(EndRecord) <=
              32768);
static_assert(sizeof(gpureap_scan_match::inodes) / sizeof(gpureap_scan_match::inodes[0]) ==
              GPUREAP_MAX_MATCH_INODES);
constexpr unsigned kMaxNsLevels = GPUREAP_MAX_NS_LEVELS;
constexpr std::uint32_t kPfExiting = 0x4;  // include/linux/sched.h: PF_EXITING

// A record's size from its kind (records.h), and for an args record from
// its header (`have` bytes at `bytes`; SIZE_MAX: the header is not all there
// yet); 0 for a kind we do not know or a size that is not its own.
std::size_t record_size(std::uint32_t kind, const char* bytes, std::size_t have) {
  switch (kind) {
    case GPUREAP_REC_ARGS: {
      if (have < sizeof(ArgsRecord)) return SIZE_MAX;
      ArgsRecord r{};
      std::memcpy(&r, bytes, sizeof r);
      const std::uint64_t carried = std::uint64_t{r.arg_len} + r.env_len;
      return carried <= GPUREAP_ARGS_BYTES && r.size == sizeof r + carried ? r.size : 0;
    }
    case GPUREAP_REC_FD:
      return sizeof(FdRecord);
    case GPUREAP_REC_TABLE:
      return sizeof(TableRecord);
    case GPUREAP_REC_TASK:
      return sizeof(TaskRecord);
    case GPUREAP_REC_END:
      return sizeof(EndRecord);
    case GPUREAP_REC_CSS:
      return sizeof(CssRecord);
    case GPUREAP_REC_KTHREAD:
      return sizeof(KthreadRecord);
    default:
      return 0;
  }
}

template <class T>
T record_as(const char* bytes) {
  T r{};
  std::memcpy(&r, bytes, sizeof r);
  return r;
}

// The css_set that speaks for a task's /proc/PID/cgroup, or 0. That file is
// the css_set's cgroups, but for an exiting task (a zombie, or a leader
// whose threads live on) the kernel shows "/" on every v1 hierarchy
// (proc_cgroup_show): those read their own file.
std::uint64_t shareable_css_set(const TaskRecord& r) {
  return r.stat_ok == 1 && (r.flags & kPfExiting) == 0 ? r.css_set : 0;
}

long bpf(int cmd, bpf_attr& attr) {
  return ::syscall(SYS_bpf, cmd, &attr, sizeof attr);
}

// One of the C loaders (kernel_scan_loaders.h), the task_file form's taking
// the match it has no use for.
using LoadFn = int (*)(const gpureap_scan_match*, gpureap_scan_progs*, char*, std::size_t);

sys::Result<ScanPrograms> load_with(LoadFn load, const gpureap_scan_match& match) {
  gpureap_scan_progs progs{-1, -1, -1, -1};
  char why[512] = {};
  const int rc = load(&match, &progs, why, sizeof why);
  if (rc != 0) return sys::Error{-rc, why};
  return ScanPrograms{sys::UniqueFd(progs.scan_prog), sys::UniqueFd(progs.data_map),
                      sys::UniqueFd(progs.fds_prog), sys::UniqueFd(progs.tasks_prog)};
}

// The regular files the table walk names by inode number, or why it cannot
// (then the task_file form answers).
struct WalkMatch {
  gpureap_scan_match match{};
  std::string gap;
};

WalkMatch walk_match(const DeviceMatcher& devices, bool copy_env) {
  WalkMatch m;
  m.match.copy_env = copy_env ? 1 : 0;
  for (const auto& n : devices.nodes) {
    if (n.rdev || !n.file) continue;
    if (m.match.count == GPUREAP_MAX_MATCH_INODES) {
      m.match.count = 0;
      m.gap = "table walk: more than " + std::to_string(GPUREAP_MAX_MATCH_INODES) +
              " device files are regular files";
      return m;
    }
    m.match.inodes[m.match.count++] = n.file->ino;
  }
  return m;
}

// Attaches an iterator program and starts one iteration: the descriptor to
// read its records from. `tgid` > 0: a task iterator over that process's
// threads only (Linux 6.1+).
sys::Result<sys::UniqueFd> start_iterator(int prog_fd, const std::string& what, pid_t tgid = 0) {
  bpf_attr link_attr{};
  bpf_iter_link_info only{};
  link_attr.link_create.prog_fd = static_cast<std::uint32_t>(prog_fd);
  link_attr.link_create.attach_type = BPF_TRACE_ITER;
  if (tgid > 0) {
    only.task.pid = static_cast<std::uint32_t>(tgid);
    link_attr.link_create.iter_info = reinterpret_cast<std::uintptr_t>(&only);
    link_attr.link_create.iter_info_len = sizeof only;
  }
  long link = bpf(BPF_LINK_CREATE, link_attr);
  if (link < 0) return sys::errno_error(errno, "attach the " + what);
  sys::UniqueFd link_fd(static_cast<int>(link));
  bpf_attr iter_attr{};
  iter_attr.iter_create.link_fd = static_cast<std::uint32_t>(link_fd.get());
  long iter = bpf(BPF_ITER_CREATE, iter_attr);
  if (iter < 0) return sys::errno_error(errno, "start the " + what);
  return sys::UniqueFd(static_cast<int>(iter));
}

// The programs loaded and the first iteration started: the table walk
// through the light skeleton where the kernel can run its loader, else
// through the regular one (libbpf, linked statically), else the task_file
// form through libbpf. `fallback` says why each one before was passed over.
struct Started {
  ScanPrograms programs;
  sys::UniqueFd iter;    // gpureap_scan's, or the task_file form's gpureap_fds'
  std::string loader;    // "light_skeleton", "libbpf_skeleton" or "libbpf_task_file"
  std::string fallback;  // empty when the light skeleton answered
};

sys::Result<Started> start_scan(const WalkMatch& walk, KernelReads reads) {
  // Every skeleton resolves CO-RE relocations against the kernel's BTF: the
  // light one in the kernel, libbpf from this file. No file, no BTF.
  struct stat btf {};
  if (::stat(kVmlinuxBtf, &btf) != 0) {
    return sys::errno_error(errno, std::string("no kernel BTF: stat ") + kVmlinuxBtf);
  }
  struct Loader {
    const char* name;   // for scan.fds_loader
    const char* label;  // for the note
    LoadFn load;
    bool walks;   // loads the table walk
    bool direct;  // its direct-reads build
  };
  const Loader loaders[] = {
      {"light_skeleton", "light skeleton, direct reads", gpureap_load_scan_light_direct, true,
       true},
      {"light_skeleton", "light skeleton", gpureap_load_scan_light, true, false},
      {"libbpf_skeleton", "libbpf skeleton", gpureap_load_scan_libbpf, true, false},
      {"libbpf_task_file", "libbpf task_file",
       [](const gpureap_scan_match*, gpureap_scan_progs* out, char* why, std::size_t why_len) {
         return gpureap_load_scan_compat(out, why, why_len);
       },
       false, false}};
  std::string why = walk.gap;
  int last_err = 0;
  for (const auto& loader : loaders) {
    if (loader.walks && !walk.gap.empty()) continue;
    if (loader.direct && (reads != KernelReads::direct || !direct_reads_possible())) continue;
    auto progs = load_with(loader.load, walk.match);
    if (progs) {
      auto iter = start_iterator(progs->first(), "BPF descriptor iterator");
      if (iter) return Started{std::move(progs.value()), std::move(iter.value()), loader.name, why};
      progs = iter.error();
    }
    last_err = progs.error().code;
    if (!why.empty()) why += "; ";
    why += std::string(loader.label) + ": " + progs.error().message;
  }
  return sys::Error{last_err, why};
}

// What kept programs were loaded for: the inode numbers the walk names, or
// none and the task_file form (more than it takes).
std::vector<std::uint64_t> walk_key(const WalkMatch& walk) {
  if (!walk.gap.empty()) return {~0ULL};
  std::vector<std::uint64_t> key(walk.match.inodes, walk.match.inodes + walk.match.count);
  key.push_back(walk.match.copy_env);  // never an inode number of a regular file: 0 or 1
  return key;
}

// What a pinned entry was loaded for: the walk's key and how it reads.
std::vector<std::uint64_t> with_reads(std::vector<std::uint64_t> key, KernelReads reads) {
  key.push_back(reads == KernelReads::direct ? 1 : 0);
  return key;
}

// The kept programs (copies of their descriptors), the walk switched back on,
// and an iteration started.
sys::Result<Started> restart(const KernelPrograms::Kept& kept) {
  auto p = kept.programs.copy();
  if (!p) return sys::errno_error(errno, "keep the BPF programs");
  if (p->walks()) {
    char why[256] = {};
    if (int rc = gpureap_scan_set_data(p->data_map.get(), 1, 0, nullptr, why, sizeof why); rc != 0)
      return sys::Error{-rc, why};
  }
  auto iter = start_iterator(p->first(), "BPF descriptor iterator");
  if (!iter) return iter.error();
  return Started{std::move(*p), std::move(iter.value()), kept.loader, kept.fallback};
}

// Pins programs this process just loaded (and kept) as `entry`, for the next
// process of this build; what happened, for KernelFdTable::pin.
std::string pin_fresh(KernelPrograms& keep, const std::string& entry, const Started& fresh) {
  if (!fresh.programs.walks()) return "not pinned: the task_file form is not pinned";
  // Unkept, they would be unlocked while this process still switches their .data.
  if (!keep.kept) return "not pinned: the programs could not be kept";
  auto pinned = pin_scan(keep.pin_dir, entry, fresh.programs.scan.get(),
                         fresh.programs.data_map.get(), fresh.loader);
  if (!pinned) return "not pinned: " + pinned.error().message;
  keep.kept->pin_lock = std::move(pinned->lock);
  keep.kept->pin_status = "reused " + pinned->entry;
  return "pinned " + pinned->entry;
}

// Reads one started iteration: fn(kind, bytes) once per record, in the order
// the kernel wrote them.
template <class Fn>
sys::Status read_iterator(int iter_fd, const std::string& what, Fn&& fn) {
  // A read returns at most the iterator's own buffer (8 pages), and only the
  // pages the kernel writes are touched (no zeroing): shares read at once.
  // Room for a cut record too, should a read ever end inside one.
  constexpr std::size_t kSize = 32768 + sizeof(ArgsRecord) + GPUREAP_ARGS_BYTES;
  const auto buf = std::make_unique_for_overwrite<char[]>(kSize);
  std::size_t carry = 0;  // bytes of a record cut by the previous read
  for (;;) {
    ssize_t n = ::read(iter_fd, buf.get() + carry, kSize - carry);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys::errno_error(errno, "read the " + what);
    if (n == 0) break;
    const std::size_t have = carry + static_cast<std::size_t>(n);
    std::size_t at = 0;
    while (have - at >= sizeof(std::uint32_t)) {
      std::uint32_t kind = 0;
      std::memcpy(&kind, buf.get() + at, sizeof kind);
      const std::size_t size = record_size(kind, buf.get() + at, have - at);
      if (size == 0)
        return sys::Error{EBADMSG,
                          what + ": a record of unknown kind " + std::to_string(kind) + " or size"};
      if (size == SIZE_MAX || have - at < size) break;
      fn(kind, buf.get() + at);
      at += size;
    }
    carry = have - at;
    std::memmove(buf.get(), buf.get() + at, carry);
  }
  if (carry != 0) return sys::Error{EBADMSG, what + ": a cut record at the end"};
  return sys::Ok{};
}

// The kernel's count of tasks now (every thread of every process), from the
// host root's /proc/loadavg; nullopt when unreadable.
std::optional<unsigned> kernel_task_count(const sys::HostRoot& root) {
  auto text = root.read_file("proc/loadavg");
  return text ? parse_loadavg_tasks(*text) : std::nullopt;
}

// judge_task_count, PID 1's threads read from its status when asked.
bool saw_every_task(const sys::HostRoot& root, std::optional<unsigned> before,
                    std::optional<unsigned> after, std::uint32_t shown,
                    std::vector<pid_t>& leaders) {
  const bool saw_pid1 = std::binary_search(leaders.begin(), leaders.end(), 1);
  const TaskCount judged = judge_task_count(before, after, shown, saw_pid1, [&root] {
    auto text = root.read_file("proc/1/status");
    auto status = text ? parse_status(*text) : std::nullopt;
    return status && status->tgid == 1 ? status->threads : std::nullopt;
  });
  if (judged == TaskCount::all_but_pid1) leaders.insert(leaders.begin(), 1);
  return judged != TaskCount::incomplete;
}

std::uint64_t boottime_ticks(std::uint64_t ns_per_tick) {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return (static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
          static_cast<std::uint64_t>(ts.tv_nsec)) /
         ns_per_tick;
}

// Per-process accumulation, flushed when the records move to another task.
class Aggregator {
 public:
  Aggregator(const DeviceMatcher& devices, std::uint64_t ns_per_tick)
      : devices_(devices), ns_per_tick_(ns_per_tick), node_counts_(devices.nodes.size(), 0) {}

  // Room for about `processes` summaries: growing a vector of thousands by
  // doubling writes each into fresh pages again (page faults, 2-12 us each);
  // what is reserved and not used is never touched.
  void reserve(std::size_t processes) { out_.reserve(processes); }

  // A descriptor table's end (the table walk): its count of open descriptors.
  void add(const TableRecord& t) {
    enter(t.tgid, t.pid, t.start_ns);
    current_.fd_count += t.open_fds;
    if (t.complete != 1) current_.complete = false;
  }

  // One descriptor. `counted`: every descriptor has a record (task_file);
  // else only candidates do, and the table's end carries the count.
  void add(const FdRecord& r, bool counted) {
    enter(r.tgid, r.pid, r.start_ns);
    if (counted) ++current_.fd_count;
    KernelFdRecord k{r.mode, user_dev_from_kernel(r.rdev), user_dev_from_kernel(r.dev), r.ino};
    auto m = match_kernel_fd(devices_, k);
    if (m.node >= 0 || m.rdev) {
      files_.push_back(r.file);
      // kcmp compares by number in the leader's table; a thread with a table
      // of its own numbers another.
      if (r.pid == r.tgid) numbers_.push_back(static_cast<int>(r.fd));
    }
    if (m.node >= 0) {
      ++node_counts_[static_cast<std::size_t>(m.node)];
    } else if (m.rdev) {
      auto it = std::find_if(by_major_.begin(), by_major_.end(),
                             [&](const auto& e) { return e.first == *m.rdev; });
      if (it == by_major_.end()) {
        by_major_.emplace_back(*m.rdev, 1);
      } else {
        ++it->second;
      }
    }
  }

  std::vector<KernelFdSummary> finish() {
    flush();
    auto by_tgid = [](const auto& a, const auto& b) { return a.tgid < b.tgid; };
    // A table the walk could not finish: /proc answers for its process.
    auto drop_incomplete = [](std::vector<KernelFdSummary>& v) {
      std::erase_if(v, [](const KernelFdSummary& s) { return !s.complete; });
    };
    // The usual case, one table per process in tgid order: no second copy.
    if (std::adjacent_find(out_.begin(), out_.end(), [](const auto& a, const auto& b) {
          return a.tgid >= b.tgid;
        }) == out_.end()) {
      drop_incomplete(out_);
      return std::move(out_);
    }
    // Threads with their own descriptor table come in tid order, apart from
    // their leader: merge them into one entry per process.
    std::stable_sort(out_.begin(), out_.end(), by_tgid);
    std::vector<KernelFdSummary> merged;
    merged.reserve(out_.size());
    for (auto& s : out_) {
      if (merged.empty() || merged.back().tgid != s.tgid) {
        merged.push_back(std::move(s));
        continue;
      }
      auto& into = merged.back();
      into.fd_count += s.fd_count;
      into.complete = into.complete && s.complete;
      into.gpu_files.insert(into.gpu_files.end(), s.gpu_files.begin(), s.gpu_files.end());
      into.gpu_fd_numbers.insert(into.gpu_fd_numbers.end(), s.gpu_fd_numbers.begin(),
                                 s.gpu_fd_numbers.end());
      std::sort(into.gpu_files.begin(), into.gpu_files.end());
      into.gpu_files.erase(std::unique(into.gpu_files.begin(), into.gpu_files.end()),
                           into.gpu_files.end());
      if (into.start_ticks == 0) into.start_ticks = s.start_ticks;
      for (auto& use : s.gpu_fds) {
        auto it = std::find_if(into.gpu_fds.begin(), into.gpu_fds.end(),
                               [&](const auto& u) { return u.device == use.device; });
        if (it == into.gpu_fds.end()) {
          into.gpu_fds.push_back(std::move(use));
        } else {
          it->count += use.count;
        }
      }
    }
    drop_incomplete(merged);
    return merged;
  }

 private:
  // Records of thread `pid` of process `tgid` follow.
  void enter(std::uint32_t tgid, std::uint32_t pid, std::uint64_t start_ns) {
    const auto process = static_cast<pid_t>(tgid);
    if (!open_ || current_.tgid != process) {
      flush();
      current_ = KernelFdSummary{};
      current_.tgid = process;
      open_ = true;
    }
    if (pid == tgid) current_.start_ticks = start_ns / ns_per_tick_;
  }

  void flush() {
    if (!open_) return;
    // One exact allocation per holder, not a doubling one: thousands of them.
    current_.gpu_fds.reserve(by_major_.size() + static_cast<std::size_t>(std::count_if(
                                                    node_counts_.begin(), node_counts_.end(),
                                                    [](unsigned c) { return c > 0; })));
    for (std::size_t i = 0; i < node_counts_.size(); ++i) {
      if (node_counts_[i] > 0)
        current_.gpu_fds.push_back(DeviceUse{devices_.nodes[i].name, node_counts_[i]});
      node_counts_[i] = 0;
    }
    std::sort(by_major_.begin(), by_major_.end());
    for (const auto& [rdev, c] : by_major_) {
      current_.gpu_fds.push_back(DeviceUse{
          "nvidia-" + std::to_string(::major(rdev)) + ":" + std::to_string(::minor(rdev)), c});
    }
    by_major_.clear();
    // Gathered in vectors kept from process to process, then copied once at
    // their size: pushed straight into each holder's, they grew 1, 2, 4 (three
    // allocations and two frees each, for thousands of holders).
    std::sort(files_.begin(), files_.end());
    files_.erase(std::unique(files_.begin(), files_.end()), files_.end());
    current_.gpu_files.assign(files_.begin(), files_.end());
    current_.gpu_fd_numbers.assign(numbers_.begin(), numbers_.end());
    files_.clear();
    numbers_.clear();
    out_.push_back(std::move(current_));
    open_ = false;
  }

  const DeviceMatcher& devices_;
  std::uint64_t ns_per_tick_;
  std::vector<unsigned> node_counts_;
  std::vector<std::pair<dev_t, unsigned>> by_major_;
  std::vector<std::uint64_t> files_;  // the current process's gpu_files, as read
  std::vector<int> numbers_;          // and its gpu_fd_numbers
  KernelFdSummary current_;
  bool open_ = false;
  std::vector<KernelFdSummary> out_;
};

// records.h: gpureap_never_a_gpu, the one list the table walk applies too.
bool never_a_gpu(dev_t rdev) {
  return gpureap_never_a_gpu(::major(rdev), ::minor(rdev)) != 0;
}

// The pid the host root's /proc gives us: equal to the kernel's global tgid
// only when that procfs belongs to the initial PID namespace.
std::optional<pid_t> procfs_self(const sys::HostRoot& root) {
  char buf[32];
  ssize_t n = ::readlinkat(root.dir_fd(), "proc/self", buf, sizeof buf);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof buf) return std::nullopt;
  pid_t v = 0;
  auto [end, ec] = std::from_chars(buf, buf + n, v);
  if (ec != std::errc{} || end != buf + n) return std::nullopt;
  return v;
}

// One task record as the scan uses it; nothing where status must answer.
std::optional<KernelTask> kernel_task(const TaskRecord& r, std::uint64_t ns_per_tick) {
  // Unreadable (a failed read leaves a 0, never a pid) or nested deeper than
  // recorded: status answers.
  if (r.uid == ~0U || r.level >= kMaxNsLevels) return std::nullopt;
  for (unsigned i = 0; i <= r.level; ++i) {
    if (r.nspid[i] == 0) return std::nullopt;
  }
  KernelTask t;
  t.tgid = static_cast<pid_t>(r.tgid);
  t.uid = static_cast<uid_t>(r.uid);
  t.start_ticks = r.start_ns / ns_per_tick;
  t.css_set = shareable_css_set(r);
  if (r.areas_ok == 1) t.areas = MemoryAreas{r.arg_start, r.arg_end, r.env_start, r.env_end};
  t.levels = static_cast<std::uint8_t>(r.level + 1);
  for (unsigned i = 0; i < t.levels; ++i) t.nspid[i] = static_cast<pid_t>(r.nspid[i]);
  if (r.stat_ok == 1 && r.comm[0] != '\0') {
    StatInfo st;
    st.pid = t.tgid;
    st.comm.assign(r.comm, strnlen(r.comm, sizeof r.comm));
    st.state = task_state_letter(r.state, r.exit_state);
    st.ppid = static_cast<pid_t>(r.ppid);
    st.pgrp = static_cast<pid_t>(r.pgrp);
    st.session = static_cast<pid_t>(r.session);
    st.flags = r.flags;
    st.start_time = t.start_ticks;
    // fs/proc/array.c proc_task_name: a workqueue worker's name is built from
    // its current work, a kernel thread's from its full_name, set only where
    // comm (TASK_COMM_LEN - 1 = 15 characters) cut it.
    constexpr std::uint32_t kWorkqueueWorker = 0x20;  // PF_WQ_WORKER
    if (st.kernel_thread())
      t.name_from_proc = (st.flags & kWorkqueueWorker) != 0 || st.comm.size() >= 15;
    t.stat = std::move(st);
  }
  return t;
}

void sort_tasks(std::vector<KernelTask>& tasks) {
  const auto by_tgid = [](const KernelTask& a, const KernelTask& b) { return a.tgid < b.tgid; };
  // One reader's tasks come in the iterator's order, by pid: already sorted,
  // and std::sort would still move some of these 264-byte records about.
  if (!std::is_sorted(tasks.begin(), tasks.end(), by_tgid))
    std::sort(tasks.begin(), tasks.end(), by_tgid);
}

// The task_file form's task program, best effort: without it the scan reads
// /proc/PID/status and stat.
void read_kernel_tasks(int tasks_prog, std::uint64_t ns_per_tick, KernelFdTable& table) {
  auto iter = start_iterator(tasks_prog, "BPF task iterator");
  if (!iter) {
    table.tasks_note = iter.error().message;
    return;
  }
  // About one leader per process the descriptor pass saw, some without descriptors.
  table.tasks.reserve(table.processes.size() + table.processes.size() / 4 + 64);
  auto ran =
      read_iterator(iter->get(), "BPF task iterator", [&](std::uint32_t kind, const char* bytes) {
        if (kind != GPUREAP_REC_TASK) return;
        if (auto t = kernel_task(record_as<TaskRecord>(bytes), ns_per_tick))
          table.tasks.push_back(std::move(*t));
      });
  if (!ran) {
    table.tasks.clear();
    table.tasks_note = ran.error().message;
    return;
  }
  sort_tasks(table.tasks);
}

// One reader's part of a walk: its iteration and what it read.
struct Share {
  sys::UniqueFd iter;
  std::vector<KernelFdSummary> processes;  // sorted by tgid
  std::vector<KernelTask> tasks;           // in the kernel's order
  std::vector<pid_t> leaders;              // every leader's tgid, its record read or not
  std::optional<pid_t> reader;             // the end marker's tgid
  std::uint32_t tasks_shown = 0;           // the end marker's count
  std::optional<sys::Error> failed;
};

// The environment parsed last, and its text: forked workers at neighbouring
// pids mostly share one, and comparing it costs less than parsing it again.
struct LastEnv {
  std::string text;
  std::vector<std::pair<std::string, std::string>> keys;
  bool valid = false;
};

// An args record's bytes for the task just read (its task record comes
// first, in the same object): argv, unless the argument area was rewritten
// (setproctitle: its last byte is not the terminating NUL, and the file reads
// on into the environment, so the scan asks it), and the environment's keys
// asked for. `last`, `last_env`: what was taken before, shared or copied where
// the text is the same.
void take_args(const ArgsRecord& r, const char* bytes, const std::vector<std::string>& env_keys,
               Argv& last, LastEnv& last_env, std::vector<KernelTask>& tasks) {
  if (tasks.empty() || tasks.back().tgid != static_cast<pid_t>(r.tgid)) return;
  KernelTask& t = tasks.back();
  const std::string_view args(bytes + sizeof r, r.arg_len);
  if (args.empty() || args.back() == '\0') {
    last = parse_cmdline(args, last);
    t.argv = last;
  }
  if (r.env_copied == 1 && !env_keys.empty()) {
    const std::string_view env(bytes + sizeof r + r.arg_len, r.env_len);
    if (!last_env.valid || env != last_env.text) {
      last_env.text.assign(env);
      last_env.keys = parse_environ(env, env_keys);
      last_env.valid = true;
    }
    t.env = last_env.keys;
  }
}

// Reads one share's iteration (one of `count`). `walks`: the table walk (a
// table's count comes with its end), else task_file (one record per descriptor).
void read_share(Share& share, unsigned count, bool walks, const DeviceMatcher& devices,
                std::uint64_t ns_per_tick, const std::vector<std::string>& env_keys) {
  Aggregator agg(devices, ns_per_tick);
  agg.reserve(4096 / count);  // a node's processes, about
  if (walks) {
    share.tasks.reserve(4096 / count);
    share.leaders.reserve(4096 / count);
  }
  Argv last;
  LastEnv last_env;
  auto ran = read_iterator(
      share.iter.get(), "BPF descriptor iterator", [&](std::uint32_t kind, const char* bytes) {
        switch (kind) {
          case GPUREAP_REC_FD:
            agg.add(record_as<FdRecord>(bytes), !walks);
            break;
          case GPUREAP_REC_TABLE:
            agg.add(record_as<TableRecord>(bytes));
            break;
          case GPUREAP_REC_TASK: {
            const auto r = record_as<TaskRecord>(bytes);
            share.leaders.push_back(static_cast<pid_t>(r.tgid));
            if (auto t = kernel_task(r, ns_per_tick)) share.tasks.push_back(std::move(*t));
            break;
          }
          case GPUREAP_REC_ARGS:
            take_args(record_as<ArgsRecord>(bytes), bytes, env_keys, last, last_env, share.tasks);
            break;
          case GPUREAP_REC_KTHREAD: {
            const auto r = record_as<KthreadRecord>(bytes);
            // Right after its task record; none was kept when that one was unusable.
            if (!share.tasks.empty() && share.tasks.back().tgid == static_cast<pid_t>(r.tgid))
              name_kernel_thread(r, share.tasks.back());
            break;
          }
          case GPUREAP_REC_END: {
            const auto r = record_as<EndRecord>(bytes);
            share.reader = static_cast<pid_t>(r.reader_tgid);
            share.tasks_shown = r.tasks;
            break;
          }
          default:
            break;
        }
      });
  if (!ran) {
    share.failed = ran.error();
    return;
  }
  share.processes = agg.finish();
}

// The table walk split across `count` readers, this thread one of them: each
// iterates every task but walks only its share of the processes (by tgid), so
// the descriptor tables' cache misses are taken on several cores at once.
// The program names a share by its reader's thread id, so the threads start
// first and the shares are set once every one has said its id. Where a
// thread or an iteration cannot start, fewer readers share it; where the
// shares cannot be set, this thread walks it all (shares[0]'s iteration).
void share_walk(const ScanPrograms& programs, unsigned count, const DeviceMatcher& devices,
                std::uint64_t ns_per_tick, const std::vector<std::string>& env_keys,
                std::vector<Share>& shares) {
  for (unsigned i = 1; i < count; ++i) {
    auto iter = start_iterator(programs.scan.get(), "BPF descriptor iterator");
    if (!iter) break;
    shares.emplace_back().iter = std::move(iter.value());
  }
  std::vector<unsigned> tids(shares.size(), 0);
  std::atomic<unsigned> named{0};
  std::atomic<int> go{0};  // 1: read your share; -1: read nothing
  unsigned n = 1;          // readers, set before go (read after it)
  std::vector<std::thread> readers;
  readers.reserve(shares.size() - 1);
  for (std::size_t i = 1; i < shares.size(); ++i) {
    try {
      readers.emplace_back([&, i] {
        tids[i] = static_cast<unsigned>(::gettid());
        named.fetch_add(1);
        named.notify_one();
        go.wait(0);
        if (go.load() == 1) read_share(shares[i], n, true, devices, ns_per_tick, env_keys);
      });
    } catch (const std::system_error&) {
      break;
    }
  }
  for (unsigned seen = named.load(); seen != readers.size(); seen = named.load()) named.wait(seen);
  shares.resize(readers.size() + 1);  // iterations no thread took are closed
  tids.resize(shares.size());
  tids[0] = static_cast<unsigned>(::gettid());
  char why[256] = {};
  const bool shared = shares.size() > 1 && gpureap_scan_set_data(programs.data_map.get(), 1,
                                                                 static_cast<unsigned>(tids.size()),
                                                                 tids.data(), why, sizeof why) == 0;
  n = shared ? static_cast<unsigned>(shares.size()) : 1;
  go.store(shared ? 1 : -1);
  go.notify_all();
  read_share(shares[0], n, true, devices, ns_per_tick, env_keys);
  for (auto& r : readers) r.join();
  if (!shared) shares.resize(1);
}

}  // namespace

char task_state_letter(std::uint32_t state, std::uint32_t exit_state) {
  // include/linux/sched.h: TASK_REPORT is the low seven bits; TASK_IDLE is
  // TASK_UNINTERRUPTIBLE | TASK_NOLOAD; rtlock waiters and frozen tasks
  // (TASK_RTLOCK_WAIT, TASK_FROZEN) are reported as uninterruptible.
  constexpr std::uint32_t kReport = 0x7f, kIdle = 0x402, kRtlockWait = 0x1000, kFrozen = 0x8000;
  if ((state & kIdle) == kIdle) return 'I';
  std::uint32_t s = (state | exit_state) & kReport;
  if ((state & (kRtlockWait | kFrozen)) != 0) s = 2;
  constexpr char kLetters[] = "RSDTtXZP";
  const int index = s == 0 ? 0 : 32 - __builtin_clz(s);  // fls()
  return kLetters[index];
}

// fs/proc/array.c proc_task_name: a workqueue worker's name is wq_worker_comm's
// (its id, which comm holds whole below 15 characters, then "+" while it runs
// its latest work or "-" after, and that work's description), a kernel
// thread's get_kthread_comm's (its full name, where comm cut it); both in a
// 64-byte buffer.
void name_kernel_thread(const KthreadRecord& r, KernelTask& task) {
  if (!task.stat || !task.name_from_proc) return;
  std::string& comm = task.stat->comm;
  constexpr std::size_t kProcNameMax = 63;
  constexpr std::string_view kRescuer = "kworker/R-";
  // Empty: comm holds the name whole. The program ends it with a NUL;
  // kProcNameMax keeps a record without one in bounds.
  const auto take_full_name = [&] {
    const std::size_t full = strnlen(r.full_name, sizeof r.full_name);
    if (full > 0) comm.assign(r.full_name, std::min(full, kProcNameMax));
  };
  if (r.rescuer_ok == 1 || r.worker_ok == 1) {
    // 6.18's format_worker_id names a rescuer "kworker/R-" and its workqueue;
    // older kernels gave it the workqueue's name as comm, which /proc showed.
    if (r.rescuer_ok == 1 && r.full_name_ok == 1 && comm.starts_with(kRescuer)) {
      take_full_name();
    } else if (comm.size() >= 15) {
      return;  // cut, and no record says the rest: /proc does
    }
    const std::size_t desc = r.worker_ok == 1 ? strnlen(r.desc, sizeof r.desc) : 0;
    if (desc > 0) {
      comm += r.current == 1 ? '+' : '-';
      comm.append(r.desc, desc);
    }
    // /proc's buffer is 64 bytes: a busy rescuer's name can fill it (10 + 31 + 1 + 31).
    if (comm.size() > kProcNameMax) comm.resize(kProcNameMax);
    task.name_from_proc = false;
  } else if (r.full_name_ok == 1) {
    take_full_name();
    task.name_from_proc = false;
  }
}

const KernelFdSummary* KernelFdTable::find(pid_t tgid) const {
  auto it = std::lower_bound(processes.begin(), processes.end(), tgid,
                             [](const KernelFdSummary& s, pid_t v) { return s.tgid < v; });
  return it != processes.end() && it->tgid == tgid ? &*it : nullptr;
}

const KernelTask* KernelFdTable::find_task(pid_t tgid) const {
  auto it = std::lower_bound(tasks.begin(), tasks.end(), tgid,
                             [](const KernelTask& t, pid_t v) { return t.tgid < v; });
  return it != tasks.end() && it->tgid == tgid ? &*it : nullptr;
}

KernelFdSummary* KernelFdTable::find(pid_t tgid) {
  return const_cast<KernelFdSummary*>(std::as_const(*this).find(tgid));
}

namespace {

// find and find_task from a hint: a few steps forward, else a binary search
// of the side of the hint the pid lies on.
template <class Sorted>
auto* find_from(Sorted& sorted, pid_t tgid, std::size_t& hint) {
  auto first = sorted.begin();
  auto last = sorted.end();
  if (hint < sorted.size()) {
    if (sorted[hint].tgid <= tgid) {
      first += static_cast<std::ptrdiff_t>(hint);
    } else {
      last = first + static_cast<std::ptrdiff_t>(hint);
    }
  }
  auto it = first;
  for (int step = 0; step < 4 && it != last && it->tgid < tgid; ++step) ++it;
  if (it != last && it->tgid < tgid) {
    it = std::lower_bound(it, last, tgid, [](const auto& e, pid_t v) { return e.tgid < v; });
  }
  hint = static_cast<std::size_t>(it - sorted.begin());
  return it != sorted.end() && it->tgid == tgid ? &*it : decltype(&*it){};
}

}  // namespace

const KernelTask* KernelFdTable::find_task(pid_t tgid, std::size_t& hint) const {
  return find_from(tasks, tgid, hint);
}

KernelFdSummary* KernelFdTable::find(pid_t tgid, std::size_t& hint) {
  return find_from(processes, tgid, hint);
}

std::uint64_t boot_clock_ticks() {
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0 || 1000000000L % hz != 0) return 0;
  return boottime_ticks(static_cast<std::uint64_t>(1000000000L / hz));
}

dev_t user_dev_from_kernel(std::uint32_t kernel_dev) {
  return ::makedev(kernel_dev >> 20, kernel_dev & 0xfffffU);
}

KernelFdMatch match_kernel_fd(const DeviceMatcher& devices, const KernelFdRecord& record) {
  KernelFdMatch m;
  if (S_ISCHR(record.mode)) {
    if (never_a_gpu(record.rdev)) return m;
    for (std::size_t i = 0; i < devices.nodes.size(); ++i) {
      if (devices.nodes[i].rdev && *devices.nodes[i].rdev == record.rdev) {
        m.node = static_cast<int>(i);
        return m;
      }
    }
    if (std::find(devices.majors.begin(), devices.majors.end(), ::major(record.rdev)) !=
        devices.majors.end()) {
      m.rdev = record.rdev;
    }
  } else if (S_ISREG(record.mode)) {
    for (std::size_t i = 0; i < devices.nodes.size(); ++i) {
      const auto& f = devices.nodes[i].file;
      if (f && f->dev == record.dev && f->ino == record.ino) {
        m.node = static_cast<int>(i);
        return m;
      }
    }
  }
  return m;
}

std::string kernel_match_gap(const DeviceMatcher& devices) {
  for (const auto& n : devices.nodes) {
    if (!n.rdev && !n.file)
      return "device " + n.name + " (" + n.path + ") is known only by its path";
  }
  return {};
}

namespace {

// kernel_css_sets' records into (tgid, css_set) pairs; with `shown`, the
// count of tasks the end marker gives.
struct CssTaker {
  std::vector<std::pair<pid_t, std::uint64_t>>& ids;
  std::uint32_t* shown = nullptr;
  void operator()(std::uint32_t kind, const char* bytes) const {
    if (kind == GPUREAP_REC_END && shown != nullptr) {
      *shown = record_as<EndRecord>(bytes).tasks;
    } else if (kind == GPUREAP_REC_CSS) {
      const auto r = record_as<CssRecord>(bytes);
      ids.emplace_back(static_cast<pid_t>(r.tgid), r.css_set);
    } else if (kind == GPUREAP_REC_TASK) {  // the task_file form's task program
      const auto r = record_as<TaskRecord>(bytes);
      ids.emplace_back(static_cast<pid_t>(r.tgid), shareable_css_set(r));
    }
  }
};

}  // namespace

namespace {

// One iteration of the css_set program, over every task or (tgid > 0) one
// process's threads, its pairs appended to `ids`; with `shown`, the count of
// tasks its end marker gives.
sys::Status css_iteration(const KernelFdTable& table, pid_t tgid,
                          std::vector<std::pair<pid_t, std::uint64_t>>& ids,
                          std::uint32_t* shown = nullptr) {
  auto iter = start_iterator(table.tasks_program.get(), "BPF task iterator", tgid);
  if (!iter) return iter.error();
  return read_iterator(iter->get(), "BPF task iterator", CssTaker{ids, shown});
}

}  // namespace

sys::Result<std::vector<std::pair<pid_t, std::uint64_t>>> kernel_css_sets(const KernelFdTable& table) {
  if (!table.tasks_program) return sys::Error{ENOENT, "no BPF task program"};
  std::vector<std::pair<pid_t, std::uint64_t>> ids;
  ids.reserve(table.tasks.size() + 64);
  if (auto ran = css_iteration(table, 0, ids); !ran) return ran.error();
  std::sort(ids.begin(), ids.end());
  return ids;
}

std::optional<std::vector<pid_t>> kernel_leaders(const sys::HostRoot& root,
                                                 const KernelFdTable& table) {
  if (!table.tasks_program) return std::nullopt;
  std::vector<std::pair<pid_t, std::uint64_t>> ids;
  ids.reserve(table.tasks.size() + 64);
  std::uint32_t shown = 0;
  const auto before = kernel_task_count(root);
  const auto ran = css_iteration(table, 0, ids, &shown);
  const auto after = kernel_task_count(root);
  if (!ran || shown == 0) return std::nullopt;  // the task_file form's program has no end marker
  std::vector<pid_t> leaders;
  leaders.reserve(ids.size() + 1);
  for (const auto& [tgid, css_set] : ids) leaders.push_back(tgid);
  std::sort(leaders.begin(), leaders.end());
  if (!saw_every_task(root, before, after, shown, leaders)) return std::nullopt;
  return leaders;
}

sys::Result<std::vector<std::pair<pid_t, std::uint64_t>>> kernel_css_sets_alone(
    const KernelFdTable& table, const std::vector<pid_t>& pids) {
  if (!table.tasks_program) return sys::Error{ENOENT, "no BPF task program"};
  std::vector<std::pair<pid_t, std::uint64_t>> ids;
  ids.reserve(pids.size());
  for (pid_t pid : pids) {
    if (auto ran = css_iteration(table, pid, ids); !ran) return ran.error();
  }
  std::sort(ids.begin(), ids.end());
  return ids;
}

sys::Result<std::vector<std::pair<pid_t, std::uint64_t>>> kernel_css_sets(
    const KernelFdTable& table, const std::vector<pid_t>& only) {
  if (only.size() * kCssPassTasksPerProcess < table.tasks_shown) {
    if (auto alone = kernel_css_sets_alone(table, only)) return alone;  // else an older kernel
  }
  return kernel_css_sets(table);
}

KernelPrograms::KernelPrograms() = default;
KernelPrograms::~KernelPrograms() = default;
KernelPrograms::KernelPrograms(KernelPrograms&&) noexcept = default;
KernelPrograms& KernelPrograms::operator=(KernelPrograms&&) noexcept = default;

TaskCount judge_task_count(std::optional<unsigned> before, std::optional<unsigned> after,
                           std::uint32_t shown, bool saw_pid1,
                           const std::function<std::optional<unsigned>()>& pid1_threads) {
  if (!before || !after || *before != *after) return TaskCount::incomplete;
  if (shown == *before) return TaskCount::all;
  if (shown > *before || saw_pid1) return TaskCount::incomplete;
  const auto threads = pid1_threads();
  return threads && shown + *threads == *before ? TaskCount::all_but_pid1 : TaskCount::incomplete;
}

bool kernel_release_at_least(std::string_view release, unsigned major, unsigned minor) {
  unsigned version[2] = {0, 0};
  const char* at = release.data();
  const char* end = release.data() + release.size();
  for (unsigned i = 0; i < 2; ++i) {
    if (i == 1) {
      if (at == end || *at != '.') return false;
      ++at;
    }
    auto [next, ec] = std::from_chars(at, end, version[i]);
    if (ec != std::errc{}) return false;
    at = next;
  }
  return version[0] > major || (version[0] == major && version[1] >= minor);
}

bool direct_reads_possible() {
  utsname u{};
  return ::uname(&u) == 0 && kernel_release_at_least(u.release, 6, 17);
}

sys::Result<KernelFdTable> read_kernel_fds(const sys::HostRoot& root, const DeviceMatcher& devices,
                                           KernelPrograms* keep, unsigned shards,
                                           const std::function<void()>& loaded, KernelReads reads,
                                           const std::vector<std::string>& env_keys) {
  if (auto gap = kernel_match_gap(devices); !gap.empty()) return sys::Error{EINVAL, gap};
  // The iterator walks the reader's own PID namespace: only from the initial
  // one does it see the node (a container's prestop or observe never does).
  // Its inode number is fixed (PROC_PID_INIT_INO), so this costs no BTF read.
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) != 0)
    return sys::errno_error(errno, "stat /proc/self/ns/pid");
  if (ns.st_ino != kInitPidNamespaceInode) {
    return sys::Error{
        EXDEV, "not in the initial PID namespace: the kernel iterator would see only this one"};
  }
  const auto self = procfs_self(root);
  if (!self) return sys::Error{ENOENT, "cannot read " + root.join("proc/self")};
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0 || 1000000000L % hz != 0)
    return sys::Error{EINVAL, "clock ticks per second: " + std::to_string(hz)};
  const auto ns_per_tick = static_cast<std::uint64_t>(1000000000L / hz);

  const WalkMatch walk = walk_match(devices, !env_keys.empty());
  const auto key = walk_key(walk);
  std::optional<Started> started;
  std::string pin;
  if (keep != nullptr && keep->kept && keep->kept->key == key) {
    auto again = restart(*keep->kept);
    if (again) {
      started = std::move(again.value());
      pin = keep->kept->pin_status;  // kept by this process since an earlier scan
    } else {
      keep->kept.reset();  // loaded afresh below
    }
  }
  // Pinned by an earlier process of this build: what it loaded, for the same key.
  bool may_pin = false;
  const std::string build_id = keep != nullptr && !keep->pin_dir.empty() ? own_build_id() : "";
  const std::string entry = pin_entry_name(build_id, with_reads(key, reads));
  if (keep != nullptr && !keep->pin_dir.empty()) {
    may_pin = !build_id.empty();
    if (!may_pin) pin = "not pinned: this executable has no build id";
  }
  std::string replaced;  // why a pinned entry was removed, to pin afresh
  if (!started && may_pin) {
    auto pinned = take_pinned_scan(keep->pin_dir, entry,
                                   static_cast<std::uint32_t>(gpureap_scan_data_size()));
    if (pinned) {
      auto kept = std::make_unique<KernelPrograms::Kept>(KernelPrograms::Kept{
          ScanPrograms{std::move(pinned->prog), std::move(pinned->data), {}, {}}, key,
          pinned->loader, "", std::move(pinned->lock), "reused " + pinned->entry});
      auto again = restart(*kept);
      if (again) {
        started = std::move(again.value());
        pin = kept->pin_status;
        keep->kept = std::move(kept);
      } else {
        // It would fail every later run too: removed (this process holds its
        // lock), and what this one loads is pinned in its place.
        remove_entry(kept->pin_lock.get(), pinned->entry);
        replaced = "; the one pinned there before would not start: " + again.error().message;
      }
    } else if (pinned.error().code != ENOENT && pinned.error().code != ESTALE) {
      pin = "not pinned: " + pinned.error().message;  // in use, or not a bpffs
      may_pin = false;
    }
  }
  if (!started) {
    auto fresh = start_scan(walk, reads);
    if (!fresh) return fresh.error();
    if (keep != nullptr) {
      // Nothing kept where the copies fail: the next scan loads afresh.
      auto copy = fresh->programs.copy();
      keep->kept = copy ? std::make_unique<KernelPrograms::Kept>(KernelPrograms::Kept{
                              std::move(*copy), key, fresh->loader, fresh->fallback, {}, {}})
                        : nullptr;
      ++keep->loads;
      if (may_pin) pin = pin_fresh(*keep, entry, *fresh) + replaced;
      if (keep->kept && keep->kept->pin_status.empty()) keep->kept->pin_status = pin;
    }
    started = std::move(fresh.value());
  }
  KernelFdTable table;
  table.pin = std::move(pin);
  table.loader = std::move(started->loader);
  table.loader_note = std::move(started->fallback);
  table.started_ticks = boottime_ticks(ns_per_tick);
  ScanPrograms& programs = started->programs;
  const bool walks = programs.walks();
  if (loaded) loaded();
  std::vector<Share> shares(1);
  shares[0].iter = std::move(started->iter);
  const auto tasks_before = walks ? kernel_task_count(root) : std::nullopt;
  if (walks && shards > 1) {
    share_walk(programs, std::min(shards, static_cast<unsigned>(GPUREAP_MAX_SHARDS)), devices,
               ns_per_tick, env_keys, shares);
  } else {
    read_share(shares[0], 1, walks, devices, ns_per_tick, env_keys);
  }
  for (auto& share : shares) {
    if (share.failed) return *share.failed;
    if (!share.reader) return sys::Error{EBADMSG, "BPF descriptor iterator: no end marker"};
    if (*share.reader != *self) {
      return sys::Error{EXDEV, root.join("proc") + " is not the initial PID namespace's (self is " +
                                   std::to_string(*self) + ", the kernel's " +
                                   std::to_string(*share.reader) + ")"};
    }
  }
  const auto tasks_after = walks ? kernel_task_count(root) : std::nullopt;
  // Every share was shown every task; each wrote its own leaders.
  if (walks && std::all_of(shares.begin(), shares.end(), [&](const Share& share) {
        return share.tasks_shown == shares[0].tasks_shown;
      })) {
    for (auto& share : shares) {
      table.leaders.insert(table.leaders.end(), share.leaders.begin(), share.leaders.end());
      std::vector<pid_t>().swap(share.leaders);
    }
    std::sort(table.leaders.begin(), table.leaders.end());
    table.tasks_shown = shares[0].tasks_shown;
    table.saw_every_task =
        saw_every_task(root, tasks_before, tasks_after, shares[0].tasks_shown, table.leaders);
    if (!table.saw_every_task) std::vector<pid_t>().swap(table.leaders);
  }
  // Shares split the processes: none is in two, nothing to merge.
  table.readers = static_cast<unsigned>(shares.size());
  if (shares.size() == 1) {
    table.processes = std::move(shares[0].processes);
    table.tasks = std::move(shares[0].tasks);
  } else {  // one exact allocation each, every share's freed as soon as it is moved
    std::size_t processes = 0, tasks = 0;
    for (const auto& share : shares) {
      processes += share.processes.size();
      tasks += share.tasks.size();
    }
    table.processes.reserve(processes);
    table.tasks.reserve(tasks);
    for (auto& share : shares) {
      std::move(share.processes.begin(), share.processes.end(),
                std::back_inserter(table.processes));
      std::move(share.tasks.begin(), share.tasks.end(), std::back_inserter(table.tasks));
      std::vector<KernelFdSummary>().swap(share.processes);
      std::vector<KernelTask>().swap(share.tasks);
    }
    std::sort(table.processes.begin(), table.processes.end(),
              [](const KernelFdSummary& a, const KernelFdSummary& b) { return a.tgid < b.tgid; });
  }
  if (!walks) {
    read_kernel_tasks(programs.tasks.get(), ns_per_tick, table);
    if (!table.tasks.empty()) table.tasks_program = std::move(programs.tasks);
    return table;
  }
  sort_tasks(table.tasks);
  // From now on the program writes css_set records only: what the css_set
  // re-check reads. Where it cannot be switched, there is no re-check and
  // every process reads its own cgroup file.
  if (!table.tasks.empty()) {
    char why[256] = {};
    if (gpureap_scan_set_data(programs.data_map.get(), 0, 0, nullptr, why, sizeof why) == 0) {
      table.tasks_program = std::move(programs.scan);
    } else {
      table.tasks_note = why;
    }
  }
  // A task came or went during the walk (~10 ms; on a busy node often): the
  // css_set program alone, ~0.2 us a task, usually sees a quiet moment, where
  // the scan would otherwise list /proc (getdents, a dentry looked up per
  // process: 2-3 ms for 2,000 on the H100). Not on several readers: the
  // scan's spare threads have listed /proc by then.
  if (!table.saw_every_task && shards <= 1) {
    if (auto leaders = kernel_leaders(root, table)) {
      table.leaders = std::move(*leaders);
      table.saw_every_task = true;
    }
  }
  return table;
}

}  // namespace gpureap::proc
