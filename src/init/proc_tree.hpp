// Our descendants, read from /proc: who they are (PPid chains from our own
// pid), a pidfd that provably names the process we scanned, and whether it
// holds an NVIDIA device descriptor. Works when /proc belongs to our PID
// namespace (a container) and when it is an ancestor namespace's /proc (NSpid
// translates its numbers into ours).
#pragma once

#include <sys/types.h>

#include <cstdint>

#include "init/log.hpp"
#include "init/options.hpp"
#include "init/vec.hpp"

namespace gpureap::init {

struct ProcEntry {
  pid_t pid = 0;     // in /proc's numbering
  pid_t nspid = 0;   // in our PID namespace's numbering (what pidfd_open and our logs use)
  pid_t ppid = 0;    // /proc's numbering
  pid_t pgrp = 0;    // /proc's numbering
  char state = '?';  // R S D Z T t X I ...
  uint64_t start = 0;  // start time in clock ticks since boot: the identity check against PID reuse
  char comm[17] = {};
};

class ProcView {
 public:
  ProcView() = default;
  ~ProcView();
  ProcView(const ProcView&) = delete;
  ProcView& operator=(const ProcView&) = delete;

  // Opens /proc and finds ourselves in it. False (with a warning) when /proc is
  // missing or is not a view that contains us: descendants then cannot be scanned.
  bool open(const Log& log);
  bool usable() const { return proc_fd_ >= 0; }
  pid_t self() const { return self_; }

  // Every live or zombie descendant, sorted by pid. False when /proc cannot be read.
  bool scan(Vec<ProcEntry>& out) const;
  // A pidfd for `e` after checking that it still is that process (same start time)
  // and still our descendant (parent is us or in `scanned`); -1 when it is gone or
  // no longer ours. Never returns a handle to a process that reused the pid.
  int open_verified(const ProcEntry& e, const Vec<ProcEntry>& scanned, const Log& log) const;
  // Whether any open descriptor of `pid` is an NVIDIA device: a /dev/nvidia* path,
  // a character device of major 195, or a target under one of cfg's prefixes.
  bool holds_gpu(pid_t pid, const Config& cfg) const;

 private:
  bool read_stat(pid_t pid, ProcEntry& e) const;
  pid_t read_nspid(pid_t pid) const;

  int proc_fd_ = -1;
  pid_t self_ = 0;        // our pid in /proc's numbering
  int nspid_index_ = 0;   // index of our namespace in NSpid lines (0: /proc is ours)
};

// Pure parsers over the text of /proc files (exposed for clarity and reuse).
bool parse_stat_line(const char* text, ProcEntry& e);
// The index-th number of the "NSpid:" line of a status file; 0 when absent.
pid_t parse_nspid(const char* status_text, int index, int* count);

}  // namespace gpureap::init
