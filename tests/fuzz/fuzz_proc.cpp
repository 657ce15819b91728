// libFuzzer target for every /proc parser: the first byte picks the parser,
// the rest is the file content. The parsers promise never to crash or throw on
// any input; ASan/UBSan catch the rest. Results are also checked for the
// invariants the parsers document.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "proc/parse.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();  // an invariant broke: make libFuzzer save the input
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  using namespace gpureap::proc;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 9) {
    case 0: {
      auto s = parse_status(text);
      if (s) {
        for (pid_t p : s->nspid) check(p >= 0);
      }
      break;
    }
    case 1: {
      auto s = parse_stat(text);
      if (s) {
        check(s->pid > 0 && s->ppid >= 0 && s->pgrp >= 0 && s->session >= 0);
        check(s->comm.size() < text.size());
      }
      break;
    }
    case 2:
      for (const auto& c : parse_cgroup(text)) check(!c.path.empty());
      break;
    case 3:
      for (const auto& m : parse_mountinfo(text)) check(!m.mount_point.empty() && !m.fs_type.empty());
      break;
    case 4:
      check(unescape_octal(text).size() <= text.size());
      break;
    case 5:
      (void)parse_cmdline(text);
      break;
    case 6: {
      static const std::vector<std::string> keys{"CUDA_VISIBLE_DEVICES", "RANK", "A", ""};
      for (const auto& kv : parse_environ(text, keys)) check(!kv.first.empty());
      break;
    }
    case 8:
      for (const auto& path : parse_mapped_files(text)) check(!path.empty() && path.front() == '/');
      break;
    default:
      for (const auto& d : parse_char_devices(text)) check(!d.second.empty());
      break;
  }
  return 0;
}
