// Every open descriptor on the node in one pass of a BPF task iterator that
// reads each task's descriptor table, instead of one readlinkat per
// descriptor under /proc/<pid>/fd. The program is BPF C
// (bpf/kernel_scan.bpf.c) compiled with clang at build time, its member reads
// CO-RE relocations resolved against the running kernel's BTF, loaded through
// a libbpf skeleton: the light one where the kernel can run its loader
// program, else the regular one (libbpf, linked statically), else the
// task_file form (bpf/kernel_scan_compat.bpf.c, through libbpf: kernels
// before 5.17). Records carry their kind: per table its GPU candidates and
// its count (per descriptor, for the task_file form); this file counts them
// per process, matches them against the devices and keeps, for GPU
// descriptors, which open file description each refers to.
// The same pass gives per process what /proc/PID/status and /proc/PID/stat
// would (real uid, NSpid; parent, group, session, state, comm, start), so the
// scan reads two files less per process, and its css_set, so
// /proc/PID/cgroup is read once per css_set; that part is best effort
// (KernelFdTable::tasks_note says why it is missing).
//
// It answers only for the live kernel seen from its initial PID namespace:
// any doubt (no BTF, no iterator, no privilege, a host root whose /proc
// belongs to another PID namespace, a device known only by path) is an Error
// naming the reason for each loader, and the caller falls back to the /proc walk.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "proc/device_matcher.hpp"
#include "proc/parse.hpp"
#include "proc/process.hpp"
#include "proc/scan.hpp"
#include "sys/error.hpp"
#include "sys/host_root.hpp"
#include "sys/unique_fd.hpp"

struct gpureap_kthread_record;  // proc/bpf/records.h

namespace gpureap::proc {

struct KernelFdSummary {
  pid_t tgid = 0;
  // Start time of the thread-group leader in clock ticks since boot (the
  // stat field 22 unit), or 0 when only threads with their own table had files.
  std::uint64_t start_ticks = 0;
  unsigned fd_count = 0;
  std::vector<DeviceUse> gpu_fds;  // same naming as the /proc walk
  // The open file descriptions of those GPU descriptors (kernel file objects),
  // sorted, no repeats: Process::gpu_files.
  std::vector<std::uint64_t> gpu_files;
  std::vector<int> gpu_fd_numbers;  // their numbers in the leader's table (for kcmp)
  // false: one of its tables could not be walked whole; read_kernel_fds
  // drops such entries, so the scan walks /proc/PID/fd for them.
  bool complete = true;
};

// Where a process's argv and initial environment lie in its memory
// (mm->arg_start..arg_end, env_start..env_end): what /proc/PID/cmdline and
// environ read, copied by the scan with one process_vm_readv.
struct MemoryAreas {
  std::uint64_t arg_start = 0;
  std::uint64_t arg_end = 0;
  std::uint64_t env_start = 0;
  std::uint64_t env_end = 0;
  bool operator==(const MemoryAreas&) const = default;
};

// What /proc/PID/status would give for one process, from a BPF task iterator.
struct KernelTask {
  pid_t tgid = 0;
  uid_t uid = 0;                  // real uid
  std::uint64_t start_ticks = 0;  // as stat field 22: identity with the /proc entry
  std::uint8_t levels = 0;        // NSpid entries
  std::array<pid_t, 8> nspid{};   // outermost first
  // What /proc/PID/stat would give, as the kernel's do_task_stat computes it
  // for the initial PID namespace; unset when this kernel's BTF lacks a member.
  std::optional<StatInfo> stat;
  // A kernel thread whose /proc name may be longer than comm: a workqueue
  // worker's ("kworker/0:1-events", its current work appended) or a name cut
  // at 15 characters (the kthread's full_name). Cleared where the iterator's
  // kthread record gave that name (name_kernel_thread); the scan reads
  // /proc/PID/comm for the rest. Any other kernel thread's /proc name is comm.
  bool name_from_proc = false;
  // Its css_set (task->cgroups), 0 when unread or the task is exiting: the
  // kernel's one object per combination of cgroups on every hierarchy, v1 and
  // v2. Live processes that share it have the same /proc/PID/cgroup (an
  // exiting one shows "/" on v1 hierarchies), so the scan reads that file
  // once per css_set (proc/scan.cpp). Opaque, only compared: a kernel address.
  std::uint64_t css_set = 0;
  // Unset without an mm (a kernel thread, a zombie) or when unread.
  std::optional<MemoryAreas> areas;
  // What /proc/PID/cmdline would give, copied from its memory by the
  // iterator itself (the direct-reads build); unset where it did not (areas
  // too large, unreadable, or rewritten by setproctitle: the file then reads
  // on into the environment) and the scan copies or reads it.
  std::optional<Argv> argv;
  // The environment's keys asked for (read_kernel_fds' env_keys), copied with
  // argv for a process whose table had GPU candidates; unset where it was not.
  std::optional<std::vector<std::pair<std::string, std::string>>> env;
};

// The state letter /proc/PID/stat shows for a task's __state and exit_state
// (fs/proc/array.c: task_state_index, then "RSDTtXZPI").
char task_state_letter(std::uint32_t state, std::uint32_t exit_state);

// A kernel thread's /proc name from its kthread record (proc/bpf/records.h),
// into task.stat->comm, clearing name_from_proc, where the record says it: a
// workqueue worker's comm (below 15 characters; a rescuer's "kworker/R-" and
// its workqueue's name) with "+" or "-" and its latest work's description,
// or the full name comm cut. Else task is left as it was, and the scan reads
// /proc/PID/comm.
void name_kernel_thread(const gpureap_kthread_record& r, KernelTask& task);

struct KernelFdTable {
  std::vector<KernelFdSummary> processes;  // sorted by tgid
  // Boot-time clock ticks just before the iteration: a process that started
  // at or after this may have fds the iterator never saw.
  std::uint64_t started_ticks = 0;

  // Thread-group leaders, sorted by tgid; empty when the task records could
  // not be read (then tasks_note says why, and status is read from /proc).
  std::vector<KernelTask> tasks;
  // Every process the task pass saw (its leader's tgid, sorted), when it saw
  // every task the kernel counted before and after it (saw_every_task), or
  // else the leaders-only pass that followed did (kernel_leaders): the scan
  // then takes these for its listing of /proc. Empty otherwise.
  std::vector<pid_t> leaders;
  bool saw_every_task = false;
  // Tasks the pass was shown, threads and kernel threads included (0: the
  // task_file form).
  std::uint32_t tasks_shown = 0;
  // Also says why there is no tasks_program when there are tasks.
  std::string tasks_note;

  // The program that writes each leader's css_set, kept to run again after
  // the scan (kernel_css_sets): gpureap_scan switched to css_set records, or
  // the task_file form's task program. Invalid: no re-check.
  sys::UniqueFd tasks_program;

  // Threads that shared the table walk (read_kernel_fds' `shards`, or fewer
  // where no more could start; 1 for the task_file form).
  unsigned readers = 1;

  std::string loader;       // "light_skeleton", "libbpf_skeleton" or "libbpf_task_file"
  std::string loader_note;  // why each loader before it was passed over; empty when the first answered
  // With KernelPrograms::pin_dir: "reused ENTRY", "pinned ENTRY", or why
  // neither ("not pinned: ..."). Empty without a pin directory.
  std::string pin;

  [[nodiscard]] const KernelFdSummary* find(pid_t tgid) const;
  [[nodiscard]] const KernelTask* find_task(pid_t tgid) const;
  [[nodiscard]] KernelFdSummary* find(pid_t tgid);
  // The same, for lookups mostly in rising pid order, as a scan's readers
  // make them: `hint` (the caller's, 0 at first) is where the last lookup
  // ended, and the next pid is usually the next entry or one of the few after
  // it, where a binary search takes a dozen cache misses.
  [[nodiscard]] const KernelTask* find_task(pid_t tgid, std::size_t& hint) const;
  [[nodiscard]] KernelFdSummary* find(pid_t tgid, std::size_t& hint);
};

// Now, in KernelTask::start_ticks' unit (stat field 22): clock ticks since
// boot; 0 where the tick length is not a whole number of nanoseconds.
std::uint64_t boot_clock_ticks();

// A kernel dev_t (major << 20 | minor, what BPF reads from an inode) as the
// dev_t stat(2) returns.
dev_t user_dev_from_kernel(std::uint32_t kernel_dev);

// One kernel record, the matcher applied: which node (index), or a dev_t known
// only by its major (returned in by_major), or nothing.
struct KernelFdRecord {
  std::uint32_t mode = 0;  // inode i_mode
  dev_t rdev = 0;          // user encoding
  dev_t dev = 0;           // the inode's filesystem, user encoding
  std::uint64_t ino = 0;
};
struct KernelFdMatch {
  int node = -1;              // index in DeviceMatcher::nodes
  std::optional<dev_t> rdev;  // set when only a major in DeviceMatcher::majors matched
};
KernelFdMatch match_kernel_fd(const DeviceMatcher& devices, const KernelFdRecord& record);

// Whether the matcher can be answered by inode identity alone: every node has
// an rdev or a file identity. Empty string when it can, else why not.
std::string kernel_match_gap(const DeviceMatcher& devices);

// Runs the task iterator again: each thread-group leader's css_set now (as
// KernelTask::css_set: 0 when exiting), sorted by tgid. The scan checks with it that a process whose
// /proc/PID/cgroup spoke for its whole cgroup was still in it after the read.
sys::Result<std::vector<std::pair<pid_t, std::uint64_t>>> kernel_css_sets(const KernelFdTable& table);

// Every thread-group leader, sorted, from one more pass of the css_set
// program (tasks_program), where that pass saw every task the kernel counted
// before and after it (judge_task_count); nothing where it did not, or could
// not run. read_kernel_fds asks it where the walk's own pass, on one
// reader, did not see every task: its leaders then stand for the listing of
// /proc.
std::optional<std::vector<pid_t>> kernel_leaders(const sys::HostRoot& root,
                                                 const KernelFdTable& table);

// The same for `pids` alone: an iteration over each one's threads (the
// kernel filters them, Linux 6.1+; an error on older kernels). A process
// gone has no entry.
sys::Result<std::vector<std::pair<pid_t, std::uint64_t>>> kernel_css_sets_alone(
    const KernelFdTable& table, const std::vector<pid_t>& pids);

// The css_sets of `only`, asked alone where they are few against the tasks
// the pass was shown, else (or where the kernel cannot filter) by the whole
// pass, whose answer holds every other leader too.
sys::Result<std::vector<std::pair<pid_t, std::uint64_t>>> kernel_css_sets(
    const KernelFdTable& table, const std::vector<pid_t>& only);

// One process iterated alone costs about what this many tasks cost the whole
// pass, rounded up: 25 on the H100 (4.6 us against 0.18 us a task), 25-44 on
// the dev VM (tests/device/css_cost.cpp).
inline constexpr std::size_t kCssPassTasksPerProcess = 48;

// The scan's BPF programs kept loaded from one scan to the next, for a
// caller that scans again and again (the exporter): every scan after the
// first skips loading them (the verifier's work, 2-5 ms). One scan at a time.
// Loaded afresh when the device files to match change, or when a kept
// program cannot start. Its members are kernel_fds.cpp's.
struct KernelPrograms {
  KernelPrograms();
  ~KernelPrograms();
  KernelPrograms(KernelPrograms&&) noexcept;
  KernelPrograms& operator=(KernelPrograms&&) noexcept;

  struct Kept;
  std::unique_ptr<Kept> kept;
  unsigned loads = 0;  // how many times the programs were loaded

  // A bpffs directory where the programs are pinned for the next process of
  // this build to take (bpf_pins.hpp), or empty: nothing outlives this one.
  std::string pin_dir;
};

// `keep`: where to keep the loaded programs for the next call, and take them
// from; nullptr loads them for this call alone. `shards` > 1: the table walk
// is split across that many threads (this one among them; at most 16), each
// walking the descriptor tables of its share of the processes.
// `loaded`: called once the programs are loaded, before the walk starts (the
// scan stops the threads that worked meanwhile: the walk's take the cores).
// `reads`: for programs loaded by this call (kept ones stay as they loaded).
// `env_keys`: non-empty, the iterator copies the environment of processes
// whose tables had GPU candidates too (KernelTask::env, those keys only).
sys::Result<KernelFdTable> read_kernel_fds(const sys::HostRoot& root, const DeviceMatcher& devices,
                                           KernelPrograms* keep = nullptr, unsigned shards = 1,
                                           const std::function<void()>& loaded = {},
                                           KernelReads reads = KernelReads::direct,
                                           const std::vector<std::string>& env_keys = {});

// Whether a task pass that showed `shown` tasks saw every process, so that
// its leaders stand for a listing of /proc: it showed as many tasks as the
// kernel counted (/proc/loadavg) before it and after it, no task having come
// or gone meanwhile. One exception is known and checked: on the lent 6.18
// machines (Firecracker guests) the task iterator never shows PID 1 or any of
// its threads, while /proc lists it. Where the pass did not show PID 1 and
// fell short by exactly PID 1's threads (`pid1_threads`, asked only then),
// it saw every other: all_but_pid1. Anything else: incomplete.
enum class TaskCount { all, all_but_pid1, incomplete };
TaskCount judge_task_count(std::optional<unsigned> before, std::optional<unsigned> after,
                           std::uint32_t shown, bool saw_pid1,
                           const std::function<std::optional<unsigned>()>& pid1_threads);

// Whether the direct-reads build is tried on this kernel: it loads through
// bpf_rdonly_cast(addr, 0), which the verifier takes from Linux 6.17 on.
// Before, it is not tried: a refused load would cost each scan the verifier's
// time, and the probe build is that kernel's build, no fallback (so no note).
bool direct_reads_possible();

// Whether a kernel release ("6.18.44-fc-v1272-gpu", uname's) is at least
// major.minor; false for one that does not start with two numbers.
bool kernel_release_at_least(std::string_view release, unsigned major, unsigned minor);

}  // namespace gpureap::proc
