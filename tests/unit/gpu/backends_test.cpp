#include <gtest/gtest.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "gpu/backend.hpp"
#include "gpu/basic_backends.hpp"
#include "gpu/snapshot_json.hpp"
#include "test_util.hpp"

namespace gpureap::gpu {
namespace {

const std::string kFixture = std::string(GPUREAP_GPU_FIXTURES) + "/snapshot_h200.json";

sys::HostRoot slash() { return sys::HostRoot::open("/").value(); }

TEST(GpuJsonBackend, ReplaysFile) {
  auto b = make_json_backend(kFixture, slash());
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ((*b)->name(), "json");
  auto s = (*b)->snapshot();
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->devices.size(), 2U);
  EXPECT_EQ((*b)->unavailable_reason(), "");
  auto m = (*b)->device_matcher();
  auto has = [&](const std::string& n) {
    return std::any_of(m.nodes.begin(), m.nodes.end(), [&](const auto& node) { return node.name == n; });
  };
  EXPECT_TRUE(has("nvidia0"));  // minor 0 of the replayed device
  for (const auto& n : m.nodes) {
    if (n.name == "nvidia0") {
      EXPECT_EQ(n.rdev, makedev(195, 0));
    }
    if (n.name == "nvidiactl") {
      EXPECT_EQ(n.rdev, makedev(195, 255));
    }
  }
  EXPECT_TRUE(has("nvidiactl"));
  EXPECT_TRUE(has("nvidia-uvm"));
  EXPECT_NE(std::find(m.majors.begin(), m.majors.end(), 195U), m.majors.end());
}

TEST(GpuJsonBackend, PathIsRelativeToCurrentDirNotHostRoot) {
  testing::TempDir cwd;
  testing::TempDir root_dir;
  std::filesystem::copy_file(kFixture, cwd.path() + "/gpu.json");
  const auto old = std::filesystem::current_path();
  std::filesystem::current_path(cwd.path());
  auto root = sys::HostRoot::open(root_dir.path());
  ASSERT_TRUE(root.ok());
  auto b = make_backend("json:gpu.json", *root);
  std::filesystem::current_path(old);
  ASSERT_TRUE(b.ok()) << b.error().message;
}

TEST(GpuJsonBackend, RereadsOnEverySnapshot) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/gpu.json";
  std::filesystem::copy_file(kFixture, path);
  auto b = make_json_backend(path, slash());
  ASSERT_TRUE(b.ok());
  std::ofstream(path, std::ios::trunc) << R"({"driver_version": "new", "devices": []})";
  auto s = (*b)->snapshot();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->driver_version, "new");
}

TEST(GpuJsonBackend, BadFileIsErrorNamingFileAndField) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/gpu.json";
  std::ofstream(path) << R"({"driver_version": "x", "devices": [{"index": "0"}]})";
  auto b = make_json_backend(path, slash());
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().message, path + ": devices[0].index: expected an unsigned integer");
}

TEST(GpuJsonBackend, MissingFileIsError) {
  auto b = make_backend("json:/nonexistent/gpu.json", slash());
  ASSERT_FALSE(b.ok());
  EXPECT_TRUE(b.error().vanished());
  EXPECT_NE(b.error().message.find("/nonexistent/gpu.json"), std::string::npos);
}

TEST(GpuNoneBackend, HasNoDevicesAndSaysWhy) {
  auto b = make_backend("none", slash());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->name(), "none");
  auto s = (*b)->snapshot();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->devices.empty());
  EXPECT_EQ((*b)->unavailable_reason(), "no GPU backend");
  EXPECT_TRUE((*b)->device_matcher().empty());
}

TEST(GpuBackendFactory, UnknownSpecNamesValueAndValidOnes) {
  for (const char* spec : {"", "cuda", "json", "NVML", "sim:"}) {
    auto b = make_backend(spec, slash());
    ASSERT_FALSE(b.ok()) << spec;
    EXPECT_EQ(b.error().message, "--gpu: unknown backend '" + std::string(spec) +
                                     "' (valid: auto, nvml, sim, sim:DIR, json:FILE, none)");
  }
}

TEST(GpuBackendFactory, JsonWithoutFileIsError) {
  auto b = make_backend("json:", slash());
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.error().message.find("empty file name"), std::string::npos);
}

TEST(GpuBackendFactory, SimAndSimDir) {
  testing::TempDir dir;
  auto b = make_backend("sim:" + dir.path(), slash());
  ASSERT_TRUE(b.ok());
  EXPECT_EQ((*b)->name(), "sim");
  EXPECT_NE((*b)->unavailable_reason().find(dir.path()), std::string::npos);  // not initialised
  auto s = make_backend("sim", slash());
  ASSERT_TRUE(s.ok());
  EXPECT_EQ((*s)->name(), "sim");
}

// auto and nvml never fail: without libnvidia-ml the NVML backend is empty and says why.
TEST(GpuBackendFactory, AutoAndNvmlNeverFail) {
  for (const char* spec : {"auto", "nvml"}) {
    auto b = make_backend(spec, slash());
    ASSERT_TRUE(b.ok()) << spec;
    EXPECT_EQ((*b)->name(), "nvml");
  }
}

}  // namespace
}  // namespace gpureap::gpu
