#include "gpu/device_nodes.hpp"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "test_util.hpp"

namespace gpureap::gpu {
namespace {

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(GPUREAP_GPU_FIXTURES) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(GpuProcDevices, ParsesCapturedH200Text) {
  auto devs = parse_proc_devices(fixture("proc_devices_h200.txt"));
  ASSERT_FALSE(devs.empty());
  EXPECT_EQ(devs.front(), (CharDevice{1, "mem"}));
  EXPECT_NE(std::find(devs.begin(), devs.end(), CharDevice{195, "nvidia-frontend"}), devs.end());
  EXPECT_NE(std::find(devs.begin(), devs.end(), CharDevice{238, "nvidia-uvm"}), devs.end());
  EXPECT_NE(std::find(devs.begin(), devs.end(), CharDevice{4, "/dev/vc/0"}), devs.end());
  // Block devices are not character devices: 253 device-mapper must not appear.
  for (const auto& d : devs) EXPECT_NE(d.name, "device-mapper");
  EXPECT_EQ(nvidia_majors(devs), (std::vector<unsigned>{195, 234, 235, 236, 237, 238}));
}

TEST(GpuProcDevices, PlainNvidiaName) {
  auto devs = parse_proc_devices("Character devices:\n195 nvidia\n511 nvidia-uvm\n");
  EXPECT_EQ(nvidia_majors(devs), (std::vector<unsigned>{195, 511}));
}

TEST(GpuProcDevices, SkipsMalformedLines) {
  auto devs = parse_proc_devices(
      "garbage before any section\n"
      "195 nvidia-before-header\n"
      "Character devices:\n"
      "  1 mem\n"
      "abc nvidia\n"
      "195\n"
      "195nvidia\n"
      "99999 nvidia-too-big\n"
      "-1 nvidia-negative\n"
      "238 nvidia-uvm\r\n"
      "\n"
      "Block devices:\n"
      "195 nvidia-in-block\n");
  EXPECT_EQ(devs, (std::vector<CharDevice>{{1, "mem"}, {238, "nvidia-uvm"}}));
}

TEST(GpuProcDevices, EmptyAndTruncated) {
  EXPECT_TRUE(parse_proc_devices("").empty());
  EXPECT_TRUE(nvidia_majors({}).empty());
  // A half-written file gives what it has.
  EXPECT_EQ(parse_proc_devices("Character devices:\n  1 mem\n195 nvid"),
            (std::vector<CharDevice>{{1, "mem"}, {195, "nvid"}}));
}

void write_file(const std::string& path, const std::string& text) {
  std::ofstream(path) << text;
}

TEST(GpuRealDeviceMatcher, ReadsFixtureRoot) {
  testing::TempDir dir;
  const std::string r = dir.path();
  std::filesystem::create_directories(r + "/dev/nvidia-caps");
  std::filesystem::create_directories(r + "/proc");
  // Plain files stand in for nodes (mknod needs privileges): no rdev for them.
  for (const char* n : {"nvidia0", "nvidia1", "nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset",
                        "nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2", "null"}) {
    write_file(r + "/dev/" + n, "");
  }
  write_file(r + "/proc/devices", fixture("proc_devices_h200.txt"));
  auto root = sys::HostRoot::open(r);
  ASSERT_TRUE(root.ok());
  auto m = real_device_matcher(*root);
  std::vector<std::string> names;
  for (const auto& n : m.nodes) {
    names.push_back(n.name);
    EXPECT_EQ(n.path, "/dev/" + n.name);
    EXPECT_FALSE(n.rdev);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"nvidia-caps/nvidia-cap1", "nvidia-caps/nvidia-cap2",
                                             "nvidia-modeset", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0",
                                             "nvidia1", "nvidiactl"}));
  EXPECT_EQ(m.majors, (std::vector<unsigned>{195, 234, 235, 236, 237, 238}));
}

TEST(GpuRealDeviceMatcher, RecordsRdevOfCharDevices) {
  // /dev/null is a char device everywhere: link it in as a stand-in node.
  testing::TempDir dir;
  std::filesystem::create_directories(dir.path() + "/dev");
  std::filesystem::create_symlink("/dev/null", dir.path() + "/dev/nvidia0");
  auto root = sys::HostRoot::open(dir.path());
  ASSERT_TRUE(root.ok());
  auto m = real_device_matcher(*root);
  ASSERT_EQ(m.nodes.size(), 1U);
  ASSERT_TRUE(m.nodes[0].rdev);
  EXPECT_EQ(major(*m.nodes[0].rdev), 1U);
  EXPECT_EQ(minor(*m.nodes[0].rdev), 3U);
  EXPECT_TRUE(m.majors.empty());  // no proc/devices under this root
}

TEST(GpuRealDeviceMatcher, EmptyRootIsEmpty) {
  testing::TempDir dir;
  auto root = sys::HostRoot::open(dir.path());
  ASSERT_TRUE(root.ok());
  EXPECT_TRUE(real_device_matcher(*root).empty());
}

}  // namespace
}  // namespace gpureap::gpu
