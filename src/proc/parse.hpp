// Pure parsers for /proc/<pid>/{status,stat,cgroup,mountinfo,cmdline,environ}
// and /proc/devices. No I/O, no exceptions: bad input yields std::nullopt or
// fewer entries, never a crash.
//
// Truncation rule (one rule for every line-based format): only lines ended by
// '\n' are trusted. A file cut mid-line (a process exiting while we read, or a
// fixture saved by hand) loses its last partial line, so a number that was
// cut short ("NSpid:\t45" from "4599") is never reported as if it were whole.
// Numbers that do not fit their type make that field absent, not wrapped.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "proc/process.hpp"

namespace gpureap::proc {

// Fields of /proc/<pid>/status the scan needs. Each is absent when its line is
// missing, cut or unparsable: the caller decides which are mandatory.
struct StatusInfo {
  std::optional<std::string> name;  // "Name:", kernel escapes (\n, \\) undone
  std::optional<char> state;        // first letter of "State:"
  std::optional<pid_t> tgid;
  std::optional<pid_t> ppid;
  std::optional<uid_t> uid;         // real uid: first number of "Uid:"
  std::vector<pid_t> nspid;         // "NSpid:", outermost first; empty when absent
  std::optional<unsigned> threads;  // "Threads:"
  bool operator==(const StatusInfo&) const = default;
};

// nullopt when no known field could be read at all (empty file, garbage).
std::optional<StatusInfo> parse_status(std::string_view text);

// Fields of /proc/<pid>/stat (see proc(5)).
struct StatInfo {
  pid_t pid = 0;
  std::string comm;  // raw bytes between the first '(' and the LAST ')'
  char state = '?';
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  std::uint32_t flags = 0;       // field 9, PF_* (PF_KTHREAD = 0x00200000)
  std::uint64_t start_time = 0;  // field 22, clock ticks after boot
  [[nodiscard]] bool kernel_thread() const { return (flags & 0x00200000u) != 0; }
  bool operator==(const StatInfo&) const = default;
};

// nullopt unless every field above parses and field 22 is followed by a
// delimiter (so a stat cut inside the start time is rejected, not misread).
std::optional<StatInfo> parse_stat(std::string_view text);

// "ID:controllers:path" lines. The path may contain ':' (misconfigured
// containerd), so only the first two colons split. Malformed lines are skipped.
std::vector<CgroupLine> parse_cgroup(std::string_view text);

// The lines that can decide a container: the v1 memory line, the v2 line, and
// the first line of every other distinct path, in order. A v1 host repeats a
// container's path on every controller line (a dozen per process on a node of
// thousands); the container is read from the memory line, else the v2 line,
// else any line, so dropping repeats of a path changes no answer.
std::vector<CgroupLine> distinct_cgroup_paths(std::vector<CgroupLine> lines);

struct MountInfo {
  unsigned mount_id = 0;
  unsigned parent_id = 0;
  unsigned major = 0;
  unsigned minor = 0;
  std::string root;         // octal escapes (\040 ...) undone
  std::string mount_point;  // octal escapes undone
  std::string options;      // per-mount options ("rw,relatime")
  std::string fs_type;      // first field after " - "
  std::string source;       // octal escapes undone
  std::string super_options;
  bool operator==(const MountInfo&) const = default;
};

// One entry per well-formed line; malformed lines are skipped.
std::vector<MountInfo> parse_mountinfo(std::string_view text);

// Undoes the kernel's "\ooo" escapes (mangle() in fs/proc_namespace.c); an
// escape that is not three octal digits is kept literally.
std::string unescape_octal(std::string_view s);

// /proc/loadavg ("0.20 0.18 0.12 1/80 11206"): the kernel's count of tasks,
// every thread of every process (the fourth field's number after '/').
// nullopt when the line is not that.
std::optional<unsigned> parse_loadavg_tasks(std::string_view text);

// NUL-separated arguments. A last argument without its NUL is kept: processes
// that rewrite their argv (setproctitle) legitimately drop it. Where `like`
// holds the same text, the result shares it (Argv::from_text).
Argv parse_cmdline(std::string_view text, const Argv& like = {});

// NUL-separated KEY=VALUE; returns only `keys`, in the order found, first
// occurrence of a key wins (as getenv). A last entry without its NUL is
// dropped (the kernel always writes it; its absence means a cut read).
std::vector<std::pair<std::string, std::string>> parse_environ(std::string_view text,
                                                               const std::vector<std::string>& keys);

// The "Character devices:" section of /proc/devices: (major, name) pairs, e.g.
// (195, "nvidia-frontend"), (508, "nvidia-uvm"). Malformed lines are skipped.
std::vector<std::pair<unsigned, std::string>> parse_char_devices(std::string_view text);

// The distinct files /proc/<pid>/maps shows mapped, in order of first
// appearance ("address perms offset dev inode path"). Anonymous and special
// mappings ([heap], [vdso], ...) have no file and are skipped; a path keeps
// the kernel's "\012" for a newline and its " (deleted)" suffix, so it never
// equals a live path by accident. Malformed lines are skipped.
std::vector<std::string> parse_mapped_files(std::string_view text);

}  // namespace gpureap::proc
