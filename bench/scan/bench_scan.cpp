// bench_scan: one process scan as a tiny CLI, so the harness can measure its
// wall time and max RSS exactly as it measures fuser and lsof (fork, exec, wait4).
//   bench_scan [--threads N] [--root DIR] [--no-majors] [--no-fds] [--repeat N]
//              [--fd-source auto|bpf|procfs] [--reads direct|probe] [--phases]
//              [--bpf-pin-dir DIR] DEVICE_FILE...
// --reads probe: the table walk's build that reads inodes with bpf_probe_read_kernel.
// --no-fds and no DEVICE_FILE split the cost: files only / fd listing without readlink.
// --bpf-pin-dir: take the programs an earlier run pinned there, or pin them
// (gpureap's --bpf-pin-dir); the line then says pin=reused|pinned|not.
// --phases: first the BPF descriptor pass alone, twice on N threads (loaded and
// walked, then walked again by the kept programs), printed as load_walk_ms and walk_ms.
// Prints one line: threads, scan time inside the process, processes, holders
// (processes with a matched descriptor), matched descriptors, VmHWM.
#include <sys/resource.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <optional>
#include <string>
#include <string_view>

#include "proc/kernel_fds.hpp"
#include "proc/scan.hpp"

namespace {

long vm_hwm_kb() {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return -1;
  char line[256];
  long kb = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, "VmHWM:", 6) == 0) kb = std::strtol(line + 6, nullptr, 10);
  }
  (void)std::fclose(f);  // read-only: nothing to lose
  return kb;
}

}  // namespace

int main(int argc, char** argv) try {
  using namespace gpureap;
  unsigned threads = 1;
  std::string root_path = "/";
  bool majors = true;
  bool read_fds = true;
  bool phases = false;
  unsigned repeat = 1;
  proc::FdSource fd_source = proc::FdSource::automatic;
  proc::KernelReads reads = proc::KernelReads::direct;
  proc::DeviceMatcher matcher;
  proc::KernelPrograms pinned;
  for (int i = 1; i < argc; ++i) {
    std::string_view a = argv[i];
    if (a == "--threads" && i + 1 < argc) {
      threads = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
    } else if (a == "--root" && i + 1 < argc) {
      root_path = argv[++i];
    } else if (a == "--no-majors") {
      majors = false;
    } else if (a == "--phases") {
      phases = true;
    } else if (a == "--no-fds") {
      read_fds = false;
    } else if (a == "--fd-source" && i + 1 < argc) {
      std::string_view v = argv[++i];
      fd_source = v == "bpf" ? proc::FdSource::kernel : v == "procfs" ? proc::FdSource::procfs : proc::FdSource::automatic;
    } else if (a == "--reads" && i + 1 < argc) {
      reads = std::string_view(argv[++i]) == "probe" ? proc::KernelReads::probe
                                                     : proc::KernelReads::direct;
    } else if (a == "--bpf-pin-dir" && i + 1 < argc) {
      pinned.pin_dir = argv[++i];
    } else if (a == "--repeat" && i + 1 < argc) {
      repeat = static_cast<unsigned>(std::strtoul(argv[++i], nullptr, 10));
    } else {
      std::string path(a);
      std::string name = path.substr(path.rfind('/') + 1);
      proc::DeviceNode node{name, path, std::nullopt, std::nullopt};
      struct stat st {};
      if (::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) node.file = proc::FileId{st.st_dev, st.st_ino};
      matcher.nodes.push_back(std::move(node));
    }
  }
  // As on a real node: NVIDIA's fixed major makes every /dev link a stat candidate.
  if (majors && !matcher.nodes.empty()) matcher.majors.push_back(195);

  auto root = sys::HostRoot::open(root_path);
  if (!root) {
    (void)std::fprintf(stderr, "bench_scan: %s\n", root.error().message.c_str());
    return 2;
  }
  proc::ScanOptions opts;
  opts.devices = &matcher;
  opts.threads = threads;
  opts.read_fds = read_fds;
  opts.fd_source = fd_source;
  opts.kernel_reads = reads;
  if (!pinned.pin_dir.empty()) opts.kernel_programs = &pinned;
  char phase_text[96] = "";
  if (phases) {
    proc::KernelPrograms keep;
    double ms[2] = {0, 0};
    for (double& m : ms) {
      auto t0 = std::chrono::steady_clock::now();
      auto k = proc::read_kernel_fds(*root, matcher, &keep, std::max(1u, threads), {}, reads);
      m = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (!k) {
        (void)std::fprintf(stderr, "bench_scan: %s\n", k.error().message.c_str());
        return 2;
      }
    }
    (void)std::snprintf(phase_text, sizeof phase_text, " load_walk_ms=%.2f walk_ms=%.2f", ms[0],
                        ms[1]);
  }
  // With --repeat, the best of N in-process scans (the table of the last one is printed).
  double best_ms = 0;
  std::optional<sys::Result<proc::ProcessTable>> result;
  for (unsigned r = 0; r < std::max(1u, repeat); ++r) {
    auto t0 = std::chrono::steady_clock::now();
    result.emplace(proc::scan_processes(*root, opts));
    auto t1 = std::chrono::steady_clock::now();
    double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    if (r == 0 || ms < best_ms) best_ms = ms;
    if (!*result) break;
  }
  auto& table = *result;
  if (!table) {
    (void)std::fprintf(stderr, "bench_scan: %s\n", table.error().message.c_str());
    return 2;
  }
  unsigned holders = 0;
  unsigned gpu_fds = 0;
  unsigned long fds = 0;
  for (const auto& p : table->processes) {
    holders += p.gpu_fds.empty() ? 0u : 1u;
    gpu_fds += p.gpu_fd_total();
    fds += p.fd_count;
  }
  std::printf(
      "threads=%u fds_from=%s loader=%s scan_ms=%.2f processes=%u fds=%lu holders=%u gpu_fds=%u "
      "vanished=%u hwm_kb=%ld%s%.*s%s%s%s\n",
      threads, table->stats.fds_from.c_str(),
      table->stats.fds_loader.empty() ? "-" : table->stats.fds_loader.c_str(), best_ms,
      table->stats.scanned, fds, holders, gpu_fds, table->stats.vanished, vm_hwm_kb(),
      table->stats.fds_pin.empty() ? "" : " pin=", static_cast<int>(table->stats.fds_pin.find(' ')),
      table->stats.fds_pin.c_str(),
      table->stats.fds_note.empty() ? "" : " note=", table->stats.fds_note.c_str(), phase_text);
  return 0;
} catch (const std::exception& e) {
  (void)std::fprintf(stderr, "bench_scan: %s\n", e.what());
  return 2;
}
