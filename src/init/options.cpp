#include "init/options.hpp"

#include <getopt.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#ifndef GPUREAP_INIT_VERSION
#define GPUREAP_INIT_VERSION "0.0.0"
#endif

namespace gpureap::init {

namespace {

constexpr const char* kSignalNames[32] = {
    nullptr, "HUP",  "INT",  "QUIT", "ILL",    "TRAP", "ABRT",   "BUS",  "FPE",  "KILL", "USR1",
    "SEGV",  "USR2", "PIPE", "ALRM", "TERM",   "STKFLT", "CHLD", "CONT", "STOP", "TSTP", "TTIN",
    "TTOU",  "URG",  "XCPU", "XFSZ", "VTALRM", "PROF", "WINCH",  "IO",   "PWR",  "SYS"};

void print_usage(const char* name, FILE* out) {
  std::fprintf(out,
      "gpureap-init (version %s)\n"
      "Usage: %s [OPTIONS] [--] PROGRAM [ARGS] | --version\n"
      "\n"
      "Run PROGRAM as the child of a minimal init: reap zombies, forward signals, and on\n"
      "SIGTERM/SIGINT/SIGQUIT (or when PROGRAM exits) send SIGTERM to every descendant and\n"
      "SIGKILL whatever is still alive after its grace period, so GPUs are released before\n"
      "the kubelet's deadline.\n"
      "\n"
      "Options (tini's):\n"
      "  --version            Show version and exit.\n"
      "  -h, --help           Show this help message and exit.\n"
      "  -s                   Register as a process subreaper (done anyway when not PID 1).\n"
      "  -p SIGNAL            Trigger SIGNAL when the parent dies, e.g. \"-p SIGKILL\".\n"
      "  -v                   More verbose output; repeat up to 3 times.\n"
      "  -w                   Print a warning when processes are getting reaped.\n"
      "  -g                   Send forwarded signals to the child's process group.\n"
      "  -e EXIT_CODE         Remap EXIT_CODE (0..255) to 0; repeatable.\n"
      "  -l                   Show license and exit.\n"
      "Options (gpureap):\n"
      "  --grace SECONDS      Time descendants get between SIGTERM and SIGKILL (default 20).\n"
      "  --gpu-grace SECONDS  The same for descendants holding an NVIDIA device (default 10).\n"
      "  --gpu-device-prefix PATH\n"
      "                       Descriptors whose target starts with PATH also count as a GPU\n"
      "                       (besides /dev/nvidia* and char major 195); repeatable.\n"
      "\n"
      "Environment variables:\n"
      "  TINI_SUBREAPER, GPUREAP_INIT_SUBREAPER                     like -s (when set)\n"
      "  TINI_VERBOSITY, GPUREAP_INIT_VERBOSITY                     verbosity level (default 1)\n"
      "  TINI_KILL_PROCESS_GROUP, GPUREAP_INIT_KILL_PROCESS_GROUP   like -g (when set)\n"
      "  GPUREAP_INIT_GRACE, GPUREAP_INIT_GPU_GRACE                 like --grace, --gpu-grace\n"
      "  GPUREAP_INIT_GPU_DEVICE_PREFIX                             like --gpu-device-prefix\n",
      GPUREAP_INIT_VERSION, name);
}

bool parse_int(const char* text, long lo, long hi, long& out) {
  if (text == nullptr || *text == '\0') return false;
  char* end = nullptr;
  long v = std::strtol(text, &end, 10);
  if (*end != '\0' || v < lo || v > hi) return false;
  out = v;
  return true;
}

bool add_prefix(Config& cfg, const char* prefix) {
  if (prefix == nullptr || *prefix == '\0' || cfg.gpu_prefix_count >= kMaxGpuPrefixes) return false;
  cfg.gpu_prefixes[cfg.gpu_prefix_count++] = prefix;
  return true;
}

const char* env_either(const char* tini_name, const char* own_name) {
  const char* own = std::getenv(own_name);
  return own != nullptr ? own : std::getenv(tini_name);
}

bool parse_env(Config& cfg) {
  if (env_either("TINI_SUBREAPER", "GPUREAP_INIT_SUBREAPER") != nullptr) cfg.subreaper = true;
  if (env_either("TINI_KILL_PROCESS_GROUP", "GPUREAP_INIT_KILL_PROCESS_GROUP") != nullptr) cfg.kill_group = true;
  if (const char* v = env_either("TINI_VERBOSITY", "GPUREAP_INIT_VERBOSITY")) {
    int level = std::atoi(v);  // as tini: atoi, so junk means 0; clamped to our levels
    cfg.verbosity = level < 0 ? 0 : level > 4 ? 4 : level;
  }
  if (const char* v = std::getenv("GPUREAP_INIT_GRACE"); v != nullptr && !parse_duration(v, cfg.grace_ns)) {
    std::fprintf(stderr, "gpureap-init: invalid GPUREAP_INIT_GRACE '%s'\n", v);
    return false;
  }
  if (const char* v = std::getenv("GPUREAP_INIT_GPU_GRACE"); v != nullptr && !parse_duration(v, cfg.gpu_grace_ns)) {
    std::fprintf(stderr, "gpureap-init: invalid GPUREAP_INIT_GPU_GRACE '%s'\n", v);
    return false;
  }
  if (const char* v = std::getenv("GPUREAP_INIT_GPU_DEVICE_PREFIX"); v != nullptr && *v != '\0') add_prefix(cfg, v);
  return true;
}

enum LongOpt : int { kOptVersion = 256, kOptGrace, kOptGpuGrace, kOptGpuPrefix };

}  // namespace

bool parse_duration(const char* text, int64_t& out_ns) {
  if (text == nullptr) return false;
  const char* p = text;
  int64_t whole = 0;
  int digits = 0;
  for (; *p >= '0' && *p <= '9'; ++p, ++digits) {
    if (whole > 1'000'000) return false;  // > 11 days: certainly a typo
    whole = whole * 10 + (*p - '0');
  }
  int64_t frac_ns = 0;
  if (*p == '.') {
    ++p;
    int64_t scale = 100'000'000;
    for (; *p >= '0' && *p <= '9'; ++p, ++digits) {
      frac_ns += (*p - '0') * scale;
      scale /= 10;
    }
  }
  if (digits == 0) return false;
  int64_t unit_ns = 1'000'000'000;
  if (std::strcmp(p, "ms") == 0) {
    unit_ns = 1'000'000;
  } else if (*p != '\0' && std::strcmp(p, "s") != 0) {
    return false;
  }
  out_ns = whole * unit_ns + frac_ns / (1'000'000'000 / unit_ns);
  return true;
}

int parse_signal(const char* text) {
  if (text == nullptr || *text == '\0') return 0;
  long num = 0;
  if (parse_int(text, 1, 31, num)) return static_cast<int>(num);
  const char* name = std::strncmp(text, "SIG", 3) == 0 ? text + 3 : text;
  for (int sig = 1; sig < 32; ++sig) {
    if (std::strcmp(kSignalNames[sig], name) == 0) return sig;
  }
  return 0;
}

ParseOutcome parse_config(int argc, char** argv, Config& cfg) {
  const char* name = argc > 0 ? argv[0] : "gpureap-init";
  if (!parse_env(cfg)) return ParseOutcome::kExitFailure;

  static const option kLong[] = {
      {"version", no_argument, nullptr, kOptVersion},
      {"help", no_argument, nullptr, 'h'},
      {"grace", required_argument, nullptr, kOptGrace},
      {"gpu-grace", required_argument, nullptr, kOptGpuGrace},
      {"gpu-device-prefix", required_argument, nullptr, kOptGpuPrefix},
      {nullptr, 0, nullptr, 0},
  };
  // "+": stop at the first non-option, so PROGRAM's own flags are never ours (as tini).
  int c = 0;
  while ((c = getopt_long(argc, argv, "+hsp:vwgle:", kLong, nullptr)) != -1) {
    switch (c) {
      case 'h':
        print_usage(name, stdout);
        return ParseOutcome::kExitSuccess;
      case kOptVersion:
        std::printf("gpureap-init version %s\n", GPUREAP_INIT_VERSION);
        return ParseOutcome::kExitSuccess;
      case 'l':
        std::printf("gpureap-init is part of gpureap; see the LICENSE file of the gpureap sources.\n");
        return ParseOutcome::kExitSuccess;
      case 's': cfg.subreaper = true; break;
      case 'g': cfg.kill_group = true; break;
      case 'w': cfg.warn_on_reap = true; break;
      case 'v':
        if (cfg.verbosity < 4) ++cfg.verbosity;
        break;
      case 'p':
        cfg.parent_death_signal = parse_signal(optarg);
        if (cfg.parent_death_signal == 0) {
          std::fprintf(stderr, "gpureap-init: invalid signal for -p: '%s'\n", optarg);
          print_usage(name, stderr);
          return ParseOutcome::kExitFailure;
        }
        break;
      case 'e': {
        long code = 0;
        if (!parse_int(optarg, 0, 255, code)) {
          std::fprintf(stderr, "gpureap-init: EXIT_CODE must be 0 <= EXIT_CODE <= 255, got '%s'\n", optarg);
          return ParseOutcome::kExitFailure;
        }
        cfg.remap_to_zero[code / 32] |= 1u << (code % 32);
        break;
      }
      case kOptGrace:
      case kOptGpuGrace:
        if (!parse_duration(optarg, c == kOptGrace ? cfg.grace_ns : cfg.gpu_grace_ns)) {
          std::fprintf(stderr, "gpureap-init: invalid duration '%s' (seconds, e.g. 20, 0.5, 250ms)\n", optarg);
          return ParseOutcome::kExitFailure;
        }
        break;
      case kOptGpuPrefix:
        if (!add_prefix(cfg, optarg)) {
          std::fprintf(stderr, "gpureap-init: --gpu-device-prefix: empty, or more than %d given\n", kMaxGpuPrefixes);
          return ParseOutcome::kExitFailure;
        }
        break;
      default:  // getopt printed the reason
        print_usage(name, stderr);
        return ParseOutcome::kExitFailure;
    }
  }
  if (optind >= argc) {
    print_usage(name, stderr);
    return ParseOutcome::kExitFailure;
  }
  cfg.child_argv = argv + optind;
  return ParseOutcome::kRun;
}

}  // namespace gpureap::init
