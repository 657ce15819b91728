// Command line and environment of gpureap-init. tini's flags, environment
// variables and exit codes where they exist; the grace options are new.
#pragma once

#include <cstdint>

namespace gpureap::init {

inline constexpr int kMaxGpuPrefixes = 4;

struct Config {
  bool subreaper = false;        // -s, TINI_SUBREAPER, GPUREAP_INIT_SUBREAPER
  bool kill_group = false;       // -g, TINI_KILL_PROCESS_GROUP, GPUREAP_INIT_KILL_PROCESS_GROUP
  bool warn_on_reap = false;     // -w
  int verbosity = 1;             // -v (repeatable), TINI_VERBOSITY, GPUREAP_INIT_VERBOSITY
  int parent_death_signal = 0;   // -p SIGNAL
  uint32_t remap_to_zero[8] = {};  // -e CODE (bit per exit code 0..255)
  // Shutdown deadlines, counted from the shutdown signal (or the main child's exit).
  int64_t grace_ns = 20'000'000'000;      // --grace, GPUREAP_INIT_GRACE
  int64_t gpu_grace_ns = 10'000'000'000;  // --gpu-grace, GPUREAP_INIT_GPU_GRACE
  // Descriptor targets that count as "holds a GPU" besides /dev/nvidia* and char major 195.
  const char* gpu_prefixes[kMaxGpuPrefixes] = {};  // --gpu-device-prefix, GPUREAP_INIT_GPU_DEVICE_PREFIX
  int gpu_prefix_count = 0;
  char** child_argv = nullptr;   // PROGRAM [ARGS], null-terminated (points into argv)
};

enum class ParseOutcome { kRun, kExitSuccess, kExitFailure };

// Environment first, then the command line (flags override the environment).
// Prints usage/version/errors itself; kExitSuccess/kExitFailure mean "exit 0/1 now".
ParseOutcome parse_config(int argc, char** argv, Config& cfg);

// "1", "0.2", "1.5s", "250ms" -> nanoseconds; false when malformed or negative.
bool parse_duration(const char* text, int64_t& out_ns);
// "SIGTERM", "TERM" or "15" -> 15; 0 when unknown.
int parse_signal(const char* text);

inline bool remapped(const Config& cfg, int code) {
  return code >= 0 && code < 256 && (cfg.remap_to_zero[code / 32] >> (code % 32)) & 1u;
}

}  // namespace gpureap::init
