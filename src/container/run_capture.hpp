// run_capture: run a helper program (crictl) without a shell and collect its
// stdout, with a hard deadline. A CRI socket that never answers must not hang
// a scan, so the child runs in its own process group and the whole group is
// SIGKILLed at the deadline.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include "sys/error.hpp"

namespace gpureap::container {

struct Captured {
  int exit_code = -1;   // the exit status, or -1 when killed by a signal
  std::string out;      // all of stdout
};

// argv[0] must be a path (no PATH search). stdin and stderr are /dev/null.
// Fails (Error) when the spawn fails, the deadline passes (ETIMEDOUT), or
// stdout exceeds max_bytes (EFBIG).
sys::Result<Captured> run_capture(const std::vector<std::string>& argv,
                                  std::chrono::milliseconds timeout,
                                  std::size_t max_bytes = std::size_t{16} << 20);

}  // namespace gpureap::container
