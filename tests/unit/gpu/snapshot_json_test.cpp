#include "gpu/snapshot_json.hpp"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

namespace gpureap::gpu {
namespace {

using nlohmann::json;

std::string fixture(const std::string& name) {
  std::ifstream in(std::string(GPUREAP_GPU_FIXTURES) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

GpuSnapshot sample() {
  GpuSnapshot s;
  s.driver_version = "580.159.04";
  GpuDevice d0;
  d0.index = 0;
  d0.uuid = "GPU-aaaa";
  d0.minor = 0;
  d0.name = "NVIDIA H200";
  d0.memory = GpuMemory{150754820096ULL, 2684354560ULL, 644874240ULL};
  d0.processes = {{595, 2147483648ULL}, {1201, std::nullopt}};
  GpuDevice d1;
  d1.index = 1;
  d1.uuid = "GPU-bbbb";
  d1.name = "NVIDIA H200";
  GpuDevice d2;
  d2.index = 2;
  d2.uuid = "GPU-cccc";
  d2.minor = 7;
  d2.name = "v1 only";
  d2.memory = GpuMemory{100, 40, std::nullopt};
  s.devices = {d0, d1, d2};
  return s;
}

TEST(GpuSnapshotJson, RoundTrips) {
  const GpuSnapshot s = sample();
  auto back = snapshot_from_json_text(snapshot_to_json_text(s), "rt");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, s);
}

TEST(GpuSnapshotJson, RoundTripsEmpty) {
  auto back = snapshot_from_json_text(snapshot_to_json_text(GpuSnapshot{}), "rt");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, GpuSnapshot{});
}

TEST(GpuSnapshotJson, WritesTheContractSchema) {
  const json j = snapshot_to_json(sample());
  EXPECT_EQ(j["driver_version"], "580.159.04");
  const json& d0 = j["devices"][0];
  EXPECT_EQ(d0["index"], 0);
  EXPECT_EQ(d0["uuid"], "GPU-aaaa");
  EXPECT_EQ(d0["minor"], 0);
  EXPECT_EQ(d0["name"], "NVIDIA H200");
  EXPECT_TRUE(d0["memory"]["total"].is_number_unsigned());
  EXPECT_EQ(d0["memory"]["total"].get<std::uint64_t>(), 150754820096ULL);
  EXPECT_EQ(d0["memory"]["used"].get<std::uint64_t>(), 2684354560ULL);
  EXPECT_EQ(d0["memory"]["reserved"].get<std::uint64_t>(), 644874240ULL);
  EXPECT_EQ(d0["processes"][0]["pid"], 595);
  EXPECT_EQ(d0["processes"][0]["used_memory"].get<std::uint64_t>(), 2147483648ULL);
  // Unavailable values are null, never 0, and the keys are always present.
  EXPECT_TRUE(d0["processes"][1]["used_memory"].is_null());
  const json& d1 = j["devices"][1];
  EXPECT_TRUE(d1.contains("minor") && d1["minor"].is_null());
  EXPECT_TRUE(d1.contains("memory") && d1["memory"].is_null());
  EXPECT_TRUE(d1["processes"].is_array() && d1["processes"].empty());
  EXPECT_TRUE(j["devices"][2]["memory"]["reserved"].is_null());
  EXPECT_EQ(d0.size(), 6U);
}

TEST(GpuSnapshotJson, ParsesFixture) {
  auto s = snapshot_from_json_text(fixture("snapshot_h200.json"), "snapshot_h200.json");
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s->driver_version, "580.159.04");
  ASSERT_EQ(s->devices.size(), 2U);
  EXPECT_EQ(s->devices[0].minor, 0U);
  ASSERT_TRUE(s->devices[0].memory);
  EXPECT_EQ(s->devices[0].memory->reserved, 644874240ULL);
  ASSERT_EQ(s->devices[0].processes.size(), 2U);
  EXPECT_EQ(s->devices[0].processes[1].pid, 1201U);
  EXPECT_FALSE(s->devices[0].processes[1].used_memory);
  EXPECT_FALSE(s->devices[1].minor);
  EXPECT_FALSE(s->devices[1].memory);
}

// Each bad document gives one Error naming the file and the field.
struct BadCase {
  const char* what;
  const char* text;
  const char* expected;
};

// Named in test listings by its short name instead of a byte dump.
void PrintTo(const BadCase& c, std::ostream* os) { *os << c.what; }

class GpuSnapshotJsonBad : public ::testing::TestWithParam<BadCase> {};

TEST_P(GpuSnapshotJsonBad, NamesFileAndField) {
  auto r = snapshot_from_json_text(GetParam().text, "gpu.json");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().message, GetParam().expected);
  EXPECT_EQ(r.error().code, EINVAL);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, GpuSnapshotJsonBad,
    ::testing::Values(
        BadCase{"not_json", "{\"driver_version\": ", "gpu.json: not valid JSON (at byte 20)"},
        BadCase{"top_array", "[]", "gpu.json: (top level): expected an object"},
        BadCase{"no_version", R"({"devices": []})", "gpu.json: driver_version: missing"},
        BadCase{"version_number", R"({"driver_version": 580, "devices": []})",
                "gpu.json: driver_version: expected a string"},
        BadCase{"devices_object", R"({"driver_version": "x", "devices": {}})",
                "gpu.json: devices: expected an array"},
        BadCase{"total_string",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "GPU-x", "minor": 0, "name": "n",
                    "memory": {"total": "1", "used": 0, "reserved": 0}, "processes": []}]})",
                "gpu.json: devices[0].memory.total: expected an unsigned integer"},
        BadCase{"used_negative",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "GPU-x", "minor": 0, "name": "n",
                    "memory": {"total": 1, "used": -1, "reserved": 0}, "processes": []}]})",
                "gpu.json: devices[0].memory.used: expected an unsigned integer"},
        BadCase{"reserved_float",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "GPU-x", "minor": 0, "name": "n",
                    "memory": {"total": 1, "used": 0, "reserved": 1.5}, "processes": []}]})",
                "gpu.json: devices[0].memory.reserved: expected an unsigned integer"},
        BadCase{"memory_missing",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "GPU-x", "minor": 0, "name": "n",
                    "processes": []}]})",
                "gpu.json: devices[0].memory: missing"},
        BadCase{"memory_number",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "GPU-x", "minor": 0, "name": "n",
                    "memory": 5, "processes": []}]})",
                "gpu.json: devices[0].memory: expected an object or null"},
        BadCase{"minor_too_big",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "GPU-x", "minor": 4294967296,
                    "name": "n", "memory": null, "processes": []}]})",
                "gpu.json: devices[0].minor: value out of range"},
        BadCase{"uuid_null",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": null, "minor": 0, "name": "n",
                    "memory": null, "processes": []}]})",
                "gpu.json: devices[0].uuid: expected a string"},
        BadCase{"second_device",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "a", "minor": 0, "name": "n",
                    "memory": null, "processes": []}, 7]})",
                "gpu.json: devices[1]: expected an object"},
        BadCase{"pid_string",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "a", "minor": 0, "name": "n",
                    "memory": null, "processes": [{"pid": "595", "used_memory": 1}]}]})",
                "gpu.json: devices[0].processes[0].pid: expected an unsigned integer"},
        BadCase{"used_memory_missing",
                R"({"driver_version": "x", "devices": [{"index": 0, "uuid": "a", "minor": 0, "name": "n",
                    "memory": null, "processes": [{"pid": 1}]}]})",
                "gpu.json: devices[0].processes[0].used_memory: missing"}),
    [](const ::testing::TestParamInfo<BadCase>& p) { return std::string(p.param.what); });

}  // namespace
}  // namespace gpureap::gpu

namespace gpureap::gpu {
namespace {

TEST(GpuSnapshotJsonOutOfRange, NumberTooLargeIsAnErrorNotAnAbort) {
  // Found by the fuzzer: well-formed JSON whose number overflows a double
  // makes the library throw out_of_range, not parse_error.
  const std::string text = R"({"driver_version": "1", "devices": [{"index": 0, "memory": {"total": 1)" +
                           std::string(400, '8') + R"(}}]})";
  auto r = snapshot_from_json_text(text, "big.json");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("big.json"), std::string::npos) << r.error().message;
}

}  // namespace
}  // namespace gpureap::gpu
