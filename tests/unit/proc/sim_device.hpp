// A regular file standing for a GPU device node, as the simulated GPU's
// device files do: named by inode, as the kernel iterator matches them.
#pragma once

#include <sys/stat.h>

#include <fstream>
#include <optional>
#include <string>

#include "proc/device_matcher.hpp"

namespace gpureap::proc::test {

// Creates `path` empty and names it device `name`; nullopt when it cannot be.
inline std::optional<DeviceNode> sim_device_file(const std::string& name, const std::string& path) {
  std::ofstream(path, std::ios::binary) << "";
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return std::nullopt;
  return DeviceNode{name, path, std::nullopt, FileId{st.st_dev, st.st_ino}};
}

}  // namespace gpureap::proc::test
