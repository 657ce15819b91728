// Options every node-reading subcommand shares, and the exit codes of checks
// (node-problem-detector's convention).
#pragma once

#include <CLI/CLI.hpp>
#include <functional>
#include <optional>
#include <string>

#include "proc/scan.hpp"

namespace gpureap::cli {

inline constexpr int kExitClean = 0;
inline constexpr int kExitFindings = 1;
inline constexpr int kExitCouldNotCheck = 2;

struct CommonOptions {
  std::optional<std::string> host_root;  // else $GPUREAP_HOST_ROOT, else "/"
  std::string gpu = "auto";              // auto|nvml|sim|json:FILE|none
  bool json = false;
  unsigned threads = 0;                  // 0: one per core, at most 8
  std::string fd_source = "auto";        // auto|bpf|procfs
  std::string bpf_pin_dir;               // else $GPUREAP_BPF_PIN_DIR, else none
};

void add_common_options(CLI::App& cmd, CommonOptions& options);
// --bpf-pin-dir, for the commands whose scan can keep its programs (those
// that take a node snapshot through take_node_snapshot, and check).
void add_bpf_pin_option(CLI::App& cmd, CommonOptions& options);
unsigned effective_threads(const CommonOptions& options);
proc::FdSource fd_source(const CommonOptions& options);

// Why a scan that read no descriptor of some processes was blind, or "" when
// it was not: it walked /proc without CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH
// (other users' descriptors are then hidden from it). A process hidden from
// a privileged scan (a protected PID 1) is counted in scan.fds_denied only.
std::string unprivileged_scan(const proc::ScanStats& stats);

// Parses argv into `app` (whose subcommands set `run`) and runs the choice:
// help and version exit 0, usage errors 2 ("could not check"). Both programs' main.
int parse_and_run(CLI::App& app, int argc, const char* const* argv,
                  const std::function<int()>& run);

// Ends a one-shot command whose answer is written: flushes stdout and exits
// with `code` (2 when the flush fails) without running destructors. The
// kernel drops the address space at once, where freeing a node's snapshot
// (thousands of strings and vectors) took 0.6 ms of a 37 ms trace on the
// dev VM. Sanitizer builds return the code instead, so that LeakSanitizer
// still checks at exit.
int exit_without_teardown(int code);

// "gpureap: <message>" on stderr.
void log_error(const std::string& message);
void log_note(const std::string& message);

}  // namespace gpureap::cli
