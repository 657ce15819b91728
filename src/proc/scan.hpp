// The process scan: one Process per thread-group leader under <root>/proc.
// A scan never fails because of one pid: processes vanish, some are denied to
// us, some files are half-written; those are skipped and counted in ScanStats.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "proc/device_matcher.hpp"
#include "proc/process.hpp"
#include "sys/error.hpp"
#include "sys/host_root.hpp"

namespace gpureap::proc {

// Where descriptors come from. automatic: the kernel iterator where it can
// answer (see kernel_fds.hpp), else the /proc walk; kernel: the iterator or an
// error; procfs: one readlinkat per descriptor under /proc/<pid>/fd.
enum class FdSource { automatic, kernel, procfs };

// How the BPF programs read kernel memory (tasks, descriptor tables, files,
// inodes). direct: plain loads through bpf_rdonly_cast to untrusted memory
// where the kernel has it (6.17+), else as probe does: a bpf_probe_read_kernel
// call per member, which every kernel with iterators allows.
enum class KernelReads { direct, probe };

struct KernelPrograms;  // kernel_fds.hpp

struct ScanOptions {
  const DeviceMatcher* devices = nullptr;  // nullptr or empty: gpu_fds stays empty
  // environ is read only when non-empty, and only for GPU holders (or processes
  // whose descriptors could not be read, or every process when read_fds is off).
  std::vector<std::string> env_keys;
  // > 1: the BPF walk shared by that many threads, /proc listed and cmdlines
  // read ahead while its programs load, then the pids split across workers.
  unsigned threads = 1;
  bool read_fds = true;                    // false: fd_count 0, fds_readable false
  FdSource fd_source = FdSource::automatic;
  // Where the kernel iterator's programs are kept between scans (the
  // exporter's); nullptr: loaded for each scan.
  KernelPrograms* kernel_programs = nullptr;
  KernelReads kernel_reads = KernelReads::direct;
};

struct ScanStats {
  unsigned listed = 0;     // numeric entries in <root>/proc
  unsigned scanned = 0;    // entries returned
  unsigned vanished = 0;   // gone between listing and reading (ENOENT/ESRCH)
  unsigned denied = 0;     // EACCES/EPERM on status or stat
  unsigned malformed = 0;  // stat or status present but unparsable
  // Processes read whose descriptors could not be (EACCES/EPERM on
  // /proc/PID/fd or its links: another user's process without CAP_SYS_PTRACE
  // and CAP_DAC_READ_SEARCH, and no BPF iterator). Their GPU use is unknown.
  unsigned fds_denied = 0;
  std::string fds_from;    // "bpf" or "procfs" ("" when descriptors were not read)
  std::string fds_loader;  // for "bpf": "light_skeleton" or "libbpf_skeleton"
  // Why each faster way was passed over: the light skeleton for libbpf's, or
  // both for "procfs" although the iterator was allowed. Empty when none was.
  std::string fds_note;
  // With a BPF pin directory (--bpf-pin-dir): "reused ENTRY" (programs an
  // earlier process pinned), "pinned ENTRY", or "not pinned: why". Else empty.
  std::string fds_pin;
  bool operator==(const ScanStats&) const = default;
};

struct ProcessTable {
  std::vector<Process> processes;  // sorted by pid
  ScanStats stats;
};

// Fails only when <root>/proc itself cannot be listed, or when FdSource::kernel
// was asked for and the iterator cannot answer.
sys::Result<ProcessTable> scan_processes(const sys::HostRoot& root, const ScanOptions& options);

// Reads one process. `pid` may be a thread id (the GPU driver can report one):
// the entry returned is then its thread-group leader's (pid == tgid), because
// the start time that identifies a process is the leader's. Errors keep errno:
// vanished() / denied(); EBADMSG for unparsable content.
sys::Result<Process> read_process(const sys::HostRoot& root, pid_t pid, const ScanOptions& options);

// The files process `pid` has mapped (<root>/proc/PID/maps, parse_mapped_files).
// Errors keep errno: vanished() / denied().
sys::Result<std::vector<std::string>> read_mapped_files(const sys::HostRoot& root, pid_t pid);

}  // namespace gpureap::proc
