// Logging for gpureap-init: one formatted line per call, written with a single
// write(2) to stderr so lines from the init never interleave mid-line. No
// allocation, no stdio streams; levels follow tini (0 fatal .. 4 trace).
#pragma once

#include <sys/types.h>

namespace gpureap::init {

enum class Level : int { kFatal = 0, kWarn = 1, kInfo = 2, kDebug = 3, kTrace = 4 };

struct Log {
  int verbosity = 1;  // tini's default: fatal and warnings
  pid_t pid = 0;      // as seen from our own PID namespace (1 when we are init)

  bool enabled(Level level) const { return static_cast<int>(level) <= verbosity; }
  void print(Level level, const char* fmt, ...) const __attribute__((format(printf, 3, 4)));
};

// "ESRCH", "EACCES", ... (or "EUNKNOWN"): the name, so logs say which harmless
// condition happened without pulling strerror's locale machinery.
const char* errno_name(int err);

}  // namespace gpureap::init
