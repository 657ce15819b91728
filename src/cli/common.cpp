#include "cli/common.hpp"

#include <fmt/format.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <thread>

namespace gpureap::cli {

namespace {

// AddressSanitizer builds check for leaks at exit (GCC and clang say so differently).
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kLeakChecked = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kLeakChecked = true;
#else
constexpr bool kLeakChecked = false;
#endif
#else
constexpr bool kLeakChecked = false;
#endif

}  // namespace

void add_common_options(CLI::App& cmd, CommonOptions& options) {
  cmd.add_option("--host-root", options.host_root,
                 "Host filesystem root to read /proc, /sys, /run, /var/log under "
                 "(env GPUREAP_HOST_ROOT; default /)");
  cmd.add_option("--gpu", options.gpu, "GPU backend: auto|nvml|sim|json:FILE|none")
      ->capture_default_str();
  cmd.add_flag("--json", options.json, "Print versioned JSON on stdout (logs stay on stderr)");
  cmd.add_option("--threads", options.threads, "Process-scan threads (0 = one per core, max 8)")
      ->capture_default_str();
  cmd.add_option("--fd-source", options.fd_source,
                 "Where open descriptors are read: bpf (one kernel iterator pass, root and BTF "
                 "needed), procfs (/proc/PID/fd), auto (bpf where it can answer, else procfs)")
      ->check(CLI::IsMember({"auto", "bpf", "procfs"}))
      ->capture_default_str();
}

void add_bpf_pin_option(CLI::App& cmd, CommonOptions& options) {
  cmd.add_option("--bpf-pin-dir", options.bpf_pin_dir,
                 "Keep the descriptor scan's BPF programs pinned in this bpffs directory (e.g. "
                 "/sys/fs/bpf/gpureap), so the next run of this build skips loading them; "
                 "remove the directory to unpin (default: nothing kept)")
      ->envname("GPUREAP_BPF_PIN_DIR");
}

proc::FdSource fd_source(const CommonOptions& options) {
  if (options.fd_source == "bpf") return proc::FdSource::kernel;
  if (options.fd_source == "procfs") return proc::FdSource::procfs;
  return proc::FdSource::automatic;
}

unsigned effective_threads(const CommonOptions& options) {
  if (options.threads > 0) return options.threads;
  return std::clamp(std::thread::hardware_concurrency(), 1U, 8U);
}

int parse_and_run(CLI::App& app, int argc, const char* const* argv,
                  const std::function<int()>& run) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int rc = app.exit(e);
    return rc == 0 ? 0 : kExitCouldNotCheck;
  }
  return run ? run() : kExitCouldNotCheck;
}

int exit_without_teardown(int code) {
  if (std::fflush(stdout) != 0) {
    log_error("cannot write to stdout");
    code = kExitCouldNotCheck;
  }
  if constexpr (kLeakChecked) return code;
  std::_Exit(code);
}

void log_error(const std::string& message) { fmt::print(stderr, "gpureap: {}\n", message); }
void log_note(const std::string& message) { fmt::print(stderr, "gpureap: {}\n", message); }

namespace {

bool has_effective_capability(unsigned cap) {
  __user_cap_header_struct header{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (::syscall(SYS_capget, &header, data) != 0) return false;
  return (data[cap / 32].effective & (1U << (cap % 32))) != 0;
}

}  // namespace

std::string unprivileged_scan(const proc::ScanStats& stats) {
  if (stats.fds_denied == 0 || stats.fds_from == "bpf") return {};
  if (has_effective_capability(CAP_SYS_PTRACE) && has_effective_capability(CAP_DAC_READ_SEARCH)) return {};
  return fmt::format("the descriptors of {} processes could not be read (permission): their GPU use is unknown; "
                     "run as root, or with CAP_SYS_PTRACE and CAP_DAC_READ_SEARCH (or CAP_BPF and CAP_PERFMON)",
                     stats.fds_denied);
}

}  // namespace gpureap::cli
