// The scan's BPF programs pinned in a bpffs directory, so that the next
// process of the same build takes them instead of loading them again (the
// kernel's verifier, CO-RE and BTF searches: most of a one-shot scan's load,
// 4-6 ms on the GPU machines). Opt-in (--bpf-pin-dir): a pin outlives the
// process, which a one-shot tool should not do unasked.
//
// One entry per build and per what the programs were loaded for:
// DIR/scan-<build id>-<key hash>/, holding prog-<loader> (the program) and
// data (its .data map). A process locks its entry (flock) while it uses the
// programs, whose .data it switches; a process that finds the entry locked
// loads its own. When one is pinned, entries no process holds are removed
// where unused for a day (their mtime, set when taken), and beyond the eight
// most recently used: several builds (gpureap, its exporter, an upgrade)
// may share one directory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "sys/error.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::proc {

struct PinnedScan {
  sys::UniqueFd prog;  // gpureap_scan
  sys::UniqueFd data;  // its .data map
  std::string loader;  // how it was loaded (scan.fds_loader)
  sys::UniqueFd lock;  // the entry's directory, flock'ed while this process uses it
  std::string entry;   // the entry's path
};

// This executable's GNU build id in hex, "" without one (then nothing is pinned).
std::string own_build_id();

// The entry's name: "scan-" build id "-" 16 hex digits of `key`.
std::string pin_entry_name(std::string_view build_id, const std::vector<std::uint64_t>& key);

// The programs pinned as entry `name` in `dir`, locked for this process.
// Errors: ENOENT, none pinned yet; ESTALE, what was pinned there is not a
// scan program with its own .data map of `data_size` bytes (a process died
// pinning it, or something else was pinned there), and the entry is removed:
// both leave the entry to pin. EWOULDBLOCK, another process holds it;
// ENOTSUP, `dir` is not on a bpffs.
sys::Result<PinnedScan> take_pinned_scan(const std::string& dir, const std::string& name,
                                         std::uint32_t data_size);

// Unpins what entry `entry` (open and locked by this process as `entry_fd`)
// holds, and removes it: its programs would not start.
void remove_entry(int entry_fd, const std::string& entry);

// Pins `prog` and `data` as entry `name` in `dir` (created, on a bpffs), and
// removes stale entries (above). Returns the entry,
// locked for this process (its prog and data are copies of the descriptors).
sys::Result<PinnedScan> pin_scan(const std::string& dir, const std::string& name, int prog,
                                 int data, const std::string& loader);

}  // namespace gpureap::proc
