// What the scan counts as a GPU descriptor. Built by the GPU layer (real
// /dev/nvidia* nodes stat'ed under the host root, or the simulated device's
// files) and handed to the process scan, which knows nothing about GPUs.
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace gpureap::proc {

// The identity of a file that is not a char device (the simulated GPU's
// plain files): the kernel descriptor iterator matches inodes, not paths.
struct FileId {
  dev_t dev = 0;
  ino_t ino = 0;
  bool operator==(const FileId&) const = default;
};

struct DeviceNode {
  std::string name;           // "nvidia0", "nvidiactl", "nvidia-uvm", ...
  std::string path;           // path a holder's fd link shows, e.g. "/dev/nvidia0"
  std::optional<dev_t> rdev;  // char device number when the node could be stat'ed
  std::optional<FileId> file; // set for a plain file that could be stat'ed
};

struct DeviceMatcher {
  std::vector<DeviceNode> nodes;
  // Char-device majors that count even for nodes not listed (e.g. 195 = NVIDIA,
  // and nvidia-uvm's dynamic major from /proc/devices): a descriptor on a
  // /dev path whose rdev has one of these majors is named "nvidia-<major>:<minor>"
  // unless a listed node matches it.
  std::vector<unsigned> majors;

  [[nodiscard]] bool empty() const { return nodes.empty() && majors.empty(); }
};

}  // namespace gpureap::proc
