// Real NVIDIA device nodes under a host root: /dev/nvidia* stat'ed for their
// rdev, and the char-device majors the driver registered in /proc/devices
// (195 for nvidiaN/nvidiactl/modeset; nvidia-uvm and nvidia-caps are dynamic).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "proc/device_matcher.hpp"
#include "sys/host_root.hpp"

namespace gpureap::gpu {

// One line of the "Character devices:" section of /proc/devices.
struct CharDevice {
  unsigned major = 0;
  std::string name;  // "nvidia-frontend", "nvidia-uvm", "nvidia-caps", ...
  bool operator==(const CharDevice&) const = default;
};

// Pure parser: the character devices of /proc/devices; block devices and
// malformed lines are skipped (a half-written file yields what it has).
std::vector<CharDevice> parse_proc_devices(std::string_view text);

// Majors of every character device whose name starts with "nvidia", sorted, unique.
std::vector<unsigned> nvidia_majors(const std::vector<CharDevice>& devices);

// Nodes: every <root>/dev/nvidia* (and <root>/dev/nvidia-caps/*) named by its
// path as a holder's fd link shows it ("/dev/nvidia0"), with rdev when it is a
// char device. Majors: nvidia_majors of <root>/proc/devices. Never fails: what
// cannot be read is left out (an empty matcher means no NVIDIA driver seen).
proc::DeviceMatcher real_device_matcher(const sys::HostRoot& root);

}  // namespace gpureap::gpu
