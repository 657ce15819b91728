// nccl_missing_rank with real processes: gpureap-worker "ranks" holding the
// simulated GPU, each started with a torch.distributed environment (as torchrun
// or a hand-rolled launcher sets it); one rank is killed and `gpureap trace`
// must name the job, the missing local rank, the survivors with their memory
// and what their watchdog will do. The fake host root's proc/ is the real /proc.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

using gpureap::testing::Child;
using gpureap::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

const std::string kGpureap = GPUREAP_BIN;
const std::string kWorker = GPUREAP_WORKER_BIN;
constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

// The nccl_missing_rank finding of this test's job (by run id), or null. Other
// tests may run jobs on the same node: only ours is looked at.
const json* job_finding(const json& doc, const std::string& run_id) {
  for (const auto& f : doc["findings"]) {
    if (f["kind"] == "nccl_missing_rank" && f["group"]["run_id"] == run_id) return &f;
  }
  return nullptr;
}

class NcclIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    sim_dir_ = tmp_ / "sim";
    host_ = tmp_ / "host";
    fs::create_directories(host_);
    fs::create_directory_symlink("/proc", host_ + "/proc");
    env_ = {"GPUREAP_SIM_DIR=" + sim_dir_};
    auto init = gpureap::testing::run({kWorker, "init-sim", "--devices", "3"}, env_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
    run_id_ = "test-" + gpureap::testing::random_hex(12);
    port_ = std::to_string(20000 + std::stoul(gpureap::testing::random_hex(4), nullptr, 16) % 40000);
  }

  // Starts local rank `rank` of a `world`-rank single-node job on sim GPU `rank`,
  // holding `bytes`; returns once the worker said it holds the memory.
  Child start_rank(int rank, int world, std::uint64_t bytes, const std::vector<std::string>& extra = {}) {
    std::vector<std::string> env = env_;
    for (const auto& kv : std::vector<std::string>{
             "RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank),
             "WORLD_SIZE=" + std::to_string(world), "LOCAL_WORLD_SIZE=" + std::to_string(world),
             "MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port_, "TORCHELASTIC_RUN_ID=" + run_id_}) {
      env.push_back(kv);
    }
    for (const auto& kv : extra) env.push_back(kv);
    Child c = Child::spawn({kWorker, "hold", "--gpu", "sim", "--device", std::to_string(rank),
                            "--bytes", std::to_string(bytes)},
                           env);
    auto line = c.read_line();
    EXPECT_TRUE(line.has_value()) << "rank " << rank << " did not start";
    if (line) {
      json ready = json::parse(*line, nullptr, false);
      EXPECT_TRUE(ready.contains("bytes")) << *line;
    }
    return c;
  }

  json trace(std::optional<int> expected_exit = std::nullopt) {
    auto r = gpureap::testing::run({kGpureap, "trace", "--host-root", host_, "--gpu", "sim", "--json"},
                                   env_);
    if (expected_exit) {
      EXPECT_EQ(r.exit_code, *expected_exit) << r.err;
    } else {
      EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.exit_code << r.err;
    }
    auto doc = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.out;
    return doc;
  }

  TempDir tmp_;
  std::string sim_dir_;
  std::string host_;
  std::vector<std::string> env_;
  std::string run_id_;
  std::string port_;
};

TEST_F(NcclIntegration, KilledLocalRankZeroLeavesHangingSurvivorsReportedWithTheirMemory) {
  const std::vector<std::string> off = {"TORCH_NCCL_ASYNC_ERROR_HANDLING=0"};
  Child rank0 = start_rank(0, 3, 1024 * kMiB, off);
  Child rank1 = start_rank(1, 3, 768 * kMiB, off);
  Child rank2 = start_rank(2, 3, 512 * kMiB, off);

  // The whole job is there: no finding for it.
  json before = trace();
  EXPECT_EQ(job_finding(before, run_id_), nullptr) << before["findings"].dump(2);

  rank0.kill_and_reap();
  json doc = trace(1);
  const json* f = job_finding(doc, run_id_);
  ASSERT_NE(f, nullptr) << doc["findings"].dump(2);
  EXPECT_EQ((*f)["severity"], "critical");
  const json& g = (*f)["group"];
  EXPECT_EQ(g["master_addr"], "127.0.0.1");
  EXPECT_EQ(g["master_port"], std::stoi(port_));
  EXPECT_EQ(g["world_size"], 3);
  EXPECT_EQ(g["local_world_size"], 3);
  EXPECT_EQ(g["local_world_size_source"], "LOCAL_WORLD_SIZE");
  EXPECT_EQ(g["scope"], "host");
  EXPECT_EQ(g["missing_local_ranks"], json::array({0}));
  EXPECT_EQ(g["present_local_ranks"], json::array({1, 2}));
  EXPECT_EQ(g["watchdog"], "hang");
  EXPECT_EQ(g["survivor_memory"], (768 + 512) * kMiB);
  ASSERT_EQ(g["survivors"].size(), 2U) << g.dump(2);
  EXPECT_EQ(g["survivors"][0]["pid"], rank1.pid());
  EXPECT_EQ(g["survivors"][0]["local_rank"], 1);
  EXPECT_EQ(g["survivors"][0]["rank"], 1);
  EXPECT_EQ(g["survivors"][0]["gpu_memory"], 768 * kMiB);
  EXPECT_EQ(g["survivors"][0]["gpus"], json::array({1}));
  EXPECT_EQ(g["survivors"][0]["watchdog"], "hang");
  EXPECT_EQ(g["survivors"][0]["watchdog_env"], "TORCH_NCCL_ASYNC_ERROR_HANDLING=0");
  EXPECT_EQ(g["survivors"][0]["watchdog_detail"], "no watchdog: will hang until killed");
  EXPECT_EQ(g["survivors"][1]["pid"], rank2.pid());
  EXPECT_EQ(g["survivors"][1]["gpu_memory"], 512 * kMiB);
  EXPECT_NE((*f)["advice"].get<std::string>().find("destroy_process_group"), std::string::npos);

  // The table says it too.
  auto table = gpureap::testing::run({kGpureap, "trace", "--host-root", host_, "--gpu", "sim"}, env_);
  EXPECT_EQ(table.exit_code, 1);
  EXPECT_NE(table.out.find("nccl_missing_rank"), std::string::npos) << table.out;
}

TEST_F(NcclIntegration, ZombieRankWithDefaultErrorHandlingIsAWatchdogWarning) {
  Child rank0 = start_rank(0, 2, 256 * kMiB);
  Child rank1 = start_rank(1, 2, 256 * kMiB);
  // Rank 0 dies and is not reaped: a zombie holds nothing and counts as missing.
  ASSERT_EQ(::kill(rank0.pid(), SIGKILL), 0);
  siginfo_t info{};
  int rc = 0;
  while ((rc = ::waitid(P_PID, static_cast<id_t>(rank0.pid()), &info, WEXITED | WNOWAIT)) < 0 &&
         errno == EINTR) {
  }
  ASSERT_EQ(rc, 0);

  json doc = trace();
  const json* f = job_finding(doc, run_id_);
  ASSERT_NE(f, nullptr) << doc["findings"].dump(2);
  EXPECT_EQ((*f)["severity"], "warning");
  const json& g = (*f)["group"];
  EXPECT_EQ(g["missing_local_ranks"], json::array({0}));
  EXPECT_EQ(g["watchdog"], "watchdog");
  ASSERT_EQ(g["survivors"].size(), 1U);
  EXPECT_EQ(g["survivors"][0]["pid"], rank1.pid());
  EXPECT_EQ(g["survivors"][0]["watchdog_env"], "default");
  EXPECT_EQ(g["survivors"][0]["gpu_memory"], 256 * kMiB);
  // Child's guard reaps the zombie.
}

}  // namespace
