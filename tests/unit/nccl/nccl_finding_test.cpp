// nccl_missing_rank on hand-built snapshots: each case is a node situation with
// torch.distributed ranks (their environment as /proc/PID/environ gives it).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"
#include "report/report.hpp"
#include "snapshot_builder.hpp"

namespace {

using gpureap::findings::Finding;
using gpureap::findings::Kind;
using gpureap::findings::Severity;
using gpureap::findings::Watchdog;
using gpureap::node::NodeSnapshot;
using gpureap::node::ProcessRecord;
namespace container = gpureap::container;
namespace proc = gpureap::proc;
namespace gpu = gpureap::gpu;

using gpureap::test::kGiB;
using gpureap::test::kMiB;

using Env = std::vector<std::pair<std::string, std::string>>;

// A rank's environment as torchrun sets it (run id, master, sizes), plus extras.
Env torchrun_env(int rank, int local_rank, int world, int local_world, const std::string& run_id,
                 Env extra = {}) {
  Env e = {{"RANK", std::to_string(rank)},
           {"LOCAL_RANK", std::to_string(local_rank)},
           {"WORLD_SIZE", std::to_string(world)},
           {"LOCAL_WORLD_SIZE", std::to_string(local_world)},
           {"MASTER_ADDR", "10.0.0.5"},
           {"MASTER_PORT", "29500"},
           {"TORCHELASTIC_RUN_ID", run_id}};
  for (auto& kv : extra) e.push_back(std::move(kv));
  return e;
}

// Ranks share their launcher's group and session.
proc::Process process(pid_t pid, pid_t ppid, const char* comm, Env env, char state = 'S') {
  auto p = gpureap::test::make_process(pid, ppid, comm, state);
  p.pgrp = p.session = ppid;
  p.env = std::move(env);
  return p;
}

container::ContainerInfo in_pod(const std::string& pod, const std::string& uid) {
  return gpureap::test::pod_container("c0ffee" + uid, pod, uid, "ml", container::Qos::guaranteed, "trainer");
}

// Four GPUs; rank() adds a process holding one of them.
class Builder : public gpureap::test::SnapshotBuilder {
 public:
  Builder() {
    for (unsigned i = 0; i < 4; ++i) device(i, 0);
  }
  // A rank: holds nvidia<device> and is listed with `bytes` (no listing when nullopt).
  void rank(pid_t pid, unsigned device, std::optional<std::uint64_t> bytes, Env env,
            std::optional<container::ContainerInfo> c = std::nullopt, pid_t ppid = 1) {
    auto p = process(pid, ppid, "python3", std::move(env));
    p.gpu_fds = {{"nvidiactl", 1}, {"nvidia" + std::to_string(device), 2}, {"nvidia-uvm", 1}};
    add(std::move(p), std::move(c));
    if (bytes) list(device, static_cast<std::uint32_t>(pid), *bytes);
  }
};

std::vector<Finding> nccl(const NodeSnapshot& snap) { return gpureap::findings::detect_nccl_missing_ranks(snap); }

std::vector<pid_t> survivor_pids(const Finding& f) {
  std::vector<pid_t> out;
  for (const auto& s : f.group->survivors) out.push_back(s.pid);
  return out;
}

// The case: rank 0 of a three-GPU job died; ranks 1 and 2 spin, error handling off.
TEST(NcclMissingRank, DeadLocalRankZeroWithHangingSurvivorsIsCritical) {
  Builder b;
  const Env off = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  b.rank(201, 1, 2900 * kMiB, torchrun_env(1, 1, 3, 3, "job-a", off));
  b.rank(202, 2, 2900 * kMiB, torchrun_env(2, 2, 3, 3, "job-a", off));
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  const Finding& f = found[0];
  EXPECT_EQ(f.kind, Kind::nccl_missing_rank);
  EXPECT_EQ(f.severity, Severity::critical);
  ASSERT_NE(f.group, nullptr);
  EXPECT_EQ(f.group->run_id, "job-a");
  EXPECT_EQ(f.group->scope, "host");
  EXPECT_EQ(f.group->local_world_size, 3);
  EXPECT_EQ(f.group->local_world_size_source, "LOCAL_WORLD_SIZE");
  EXPECT_EQ(f.group->missing_local_ranks, std::vector<int>{0});
  EXPECT_EQ(f.group->present_local_ranks, (std::vector<int>{1, 2}));
  EXPECT_EQ(survivor_pids(f), (std::vector<pid_t>{201, 202}));
  EXPECT_EQ(f.group->survivor_memory, 5800 * kMiB);
  EXPECT_EQ(f.group->watchdog, "hang");
  EXPECT_EQ(f.group->survivors[0].watchdog, Watchdog::hang);
  EXPECT_EQ(f.group->survivors[0].watchdog_env, "TORCH_NCCL_ASYNC_ERROR_HANDLING=0");
  EXPECT_EQ(f.group->survivors[0].watchdog_detail, "no watchdog: will hang until killed");
  EXPECT_EQ(f.group->survivors[1].gpus, std::vector<unsigned>{2});
  EXPECT_EQ(f.group->survivors[1].rank, 2);
  EXPECT_NE(f.message.find("local rank 0 of 3 missing"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("5.7 GiB"), std::string::npos) << f.message;
  EXPECT_NE(f.advice.find("will not exit on their own"), std::string::npos) << f.advice;
  EXPECT_NE(f.advice.find("destroy_process_group"), std::string::npos);
  EXPECT_NE(f.advice.find("Kill the surviving ranks now (pids 201 202) to free 5.7 GiB"),
            std::string::npos)
      << f.advice;
  EXPECT_FALSE(f.device.has_value());  // two GPUs
}

TEST(NcclMissingRank, DefaultErrorHandlingIsAWatchdogWarning) {
  Builder b;
  b.rank(301, 1, 1 * kGiB, torchrun_env(1, 1, 2, 2, "job-b"));
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].severity, Severity::warning);
  EXPECT_EQ(found[0].device, 1U);
  const auto& s = found[0].group->survivors.at(0);
  EXPECT_EQ(s.watchdog, Watchdog::teardown);
  EXPECT_EQ(s.watchdog_env, "default");
  EXPECT_NE(s.watchdog_detail.find("watchdog will end it after the collective timeout (default 10 "
                                   "min for NCCL unless set in code)"),
            std::string::npos)
      << s.watchdog_detail;
  EXPECT_EQ(found[0].group->watchdog, "watchdog");
  EXPECT_EQ(found[0].advice.find("will not exit"), std::string::npos);
}

TEST(NcclMissingRank, WatchdogVerdictPerSurvivorFromItsEnvironment) {
  Builder b;
  b.rank(401, 1, 1 * kGiB, torchrun_env(1, 1, 6, 6, "job-c", {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "1"}}));
  b.rank(402, 2, 1 * kGiB, torchrun_env(2, 2, 6, 6, "job-c", {{"NCCL_ASYNC_ERROR_HANDLING", "0"}}));
  // The TORCH_ name wins over the older one, as in PyTorch's getCvarInt.
  b.rank(403, 3, 1 * kGiB,
         torchrun_env(3, 3, 6, 6, "job-c",
                      {{"NCCL_ASYNC_ERROR_HANDLING", "0"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "3"}}));
  // Blocking wait replaces async error handling.
  b.rank(404, 0, 1 * kGiB,
         torchrun_env(4, 4, 6, 6, "job-c",
                      {{"TORCH_NCCL_BLOCKING_WAIT", "1"}, {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}}));
  b.rank(405, 0, 1 * kGiB, torchrun_env(5, 5, 6, 6, "job-c", {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "2"}}));
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  const auto& s = found[0].group->survivors;
  ASSERT_EQ(s.size(), 5U);
  EXPECT_EQ(s[0].watchdog, Watchdog::teardown);
  EXPECT_EQ(s[1].watchdog, Watchdog::hang);
  EXPECT_EQ(s[1].watchdog_env, "NCCL_ASYNC_ERROR_HANDLING=0");
  EXPECT_EQ(s[2].watchdog, Watchdog::teardown);
  EXPECT_EQ(s[2].watchdog_env, "TORCH_NCCL_ASYNC_ERROR_HANDLING=3");
  EXPECT_EQ(s[3].watchdog, Watchdog::blocking_wait);
  EXPECT_NE(s[3].watchdog_detail.find("blocking wait: raises after"), std::string::npos);
  EXPECT_EQ(s[4].watchdog, Watchdog::cleanup_only);
  EXPECT_EQ(found[0].severity, Severity::critical);  // one survivor hangs
  EXPECT_EQ(found[0].group->watchdog, "hang");
  EXPECT_EQ(found[0].group->missing_local_ranks, std::vector<int>{0});
}

TEST(NcclMissingRank, MixedNonHangingVerdictsAreAWarning) {
  Builder b;
  b.rank(411, 1, 1 * kGiB, torchrun_env(1, 1, 3, 3, "job-m"));
  b.rank(412, 2, 1 * kGiB, torchrun_env(2, 2, 3, 3, "job-m", {{"TORCH_NCCL_BLOCKING_WAIT", "true"}}));
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].severity, Severity::warning);
  EXPECT_EQ(found[0].group->watchdog, "mixed");
}

TEST(NcclMissingRank, ZombieRankCountsAsMissing) {
  Builder b;
  const Env off = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  b.add(process(500, 1, "launcher", {}));
  b.add(process(501, 500, "python3", torchrun_env(0, 0, 2, 2, "job-z", off), 'Z'));
  b.rank(502, 1, 2 * kGiB, torchrun_env(1, 1, 2, 2, "job-z", off), std::nullopt, 500);
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].group->missing_local_ranks, std::vector<int>{0});
  EXPECT_EQ(found[0].group->zombie_pids, std::vector<pid_t>{501});
  EXPECT_EQ(survivor_pids(found[0]), std::vector<pid_t>{502});
  EXPECT_NE(found[0].message.find("a zombie counts as missing"), std::string::npos);
}

TEST(NcclMissingRank, LocalWorldSizeInferredFromWorldSizeWithALoopbackMaster) {
  Builder b;
  // A hand-rolled launcher: no LOCAL_WORLD_SIZE, no run id, no LOCAL_RANK.
  const Env e1 = {{"RANK", "1"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29511"}};
  const Env e2 = {{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29511"}};
  b.rank(601, 1, 1 * kGiB, e1);
  b.rank(602, 2, 1 * kGiB, e2);
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].group->local_world_size, 3);
  EXPECT_NE(found[0].group->local_world_size_source.find("inferred from WORLD_SIZE"), std::string::npos);
  EXPECT_NE(found[0].group->local_world_size_source.find("loopback"), std::string::npos);
  EXPECT_EQ(found[0].group->missing_local_ranks, std::vector<int>{0});
  EXPECT_EQ(found[0].group->master_port, 29511);
  EXPECT_TRUE(found[0].group->run_id.empty());
}

TEST(NcclMissingRank, NoInferenceWhenTheMasterIsRemote) {
  // Without LOCAL_WORLD_SIZE and with a remote master, rank 0 may live on another node.
  Builder b;
  b.rank(611, 1, 1 * kGiB, {{"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"},
                            {"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "29500"}});
  EXPECT_TRUE(nccl(b.build()).empty());
}

TEST(NcclMissingRank, MultiNodeJobSaysOtherNodesAreNotVisible) {
  Builder b;
  b.rank(621, 1, 1 * kGiB, torchrun_env(9, 1, 8, 4, "job-mn", {{"GROUP_RANK", "2"}}));
  b.rank(622, 2, 1 * kGiB, torchrun_env(10, 2, 8, 4, "job-mn", {{"GROUP_RANK", "2"}}));
  b.rank(623, 3, 1 * kGiB, torchrun_env(11, 3, 8, 4, "job-mn", {{"GROUP_RANK", "2"}}));
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].group->group_rank, 2);
  EXPECT_EQ(found[0].group->missing_local_ranks, std::vector<int>{0});
  EXPECT_NE(found[0].message.find("not visible here"), std::string::npos);
}

TEST(NcclMissingRank, CompleteGroupIsClean) {
  Builder b;
  for (int r = 0; r < 3; ++r) {
    b.rank(700 + r, static_cast<unsigned>(r), 2 * kGiB, torchrun_env(r, r, 3, 3, "job-ok"));
  }
  EXPECT_TRUE(nccl(b.build()).empty());
}

TEST(NcclMissingRank, ProcessesWithoutTheGpuAreNotRanks) {
  Builder b;
  // The launcher and a CPU-only helper carry RANK env but hold nothing: no finding
  // for a "group" of them, and they do not fill a GPU group's gaps.
  b.add(process(800, 1, "torchrun", torchrun_env(0, 0, 2, 2, "job-cpu")));
  b.add(process(801, 800, "python3", torchrun_env(1, 1, 2, 2, "job-cpu")));
  EXPECT_TRUE(nccl(b.build()).empty());

  Builder c;
  c.add(process(810, 1, "python3", torchrun_env(0, 0, 2, 2, "job-gpu")));  // no GPU: not rank 0
  c.rank(811, 1, 1 * kGiB, torchrun_env(1, 1, 2, 2, "job-gpu"));
  auto found = nccl(c.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].group->missing_local_ranks, std::vector<int>{0});
  EXPECT_EQ(survivor_pids(found[0]), std::vector<pid_t>{811});
}

TEST(NcclMissingRank, SurvivorsHoldingOnlyControlNodesHoldNoMemory) {
  Builder b;
  auto p = process(820, 1, "python3", torchrun_env(1, 1, 2, 2, "job-ctl"));
  p.gpu_fds = {{"nvidiactl", 1}};
  b.add(p);
  EXPECT_TRUE(nccl(b.build()).empty());
}

TEST(NcclMissingRank, TwoJobsOnOneNodeDoNotFillEachOthersGaps) {
  Builder b;
  // Job A (by master address, no run id) is complete; job B lost its local rank 0,
  // and job A's rank 0 must not count for it.
  auto master_env = [](int rank, int port) {
    return Env{{"RANK", std::to_string(rank)},      {"LOCAL_RANK", std::to_string(rank)},
               {"WORLD_SIZE", "2"},                 {"LOCAL_WORLD_SIZE", "2"},
               {"MASTER_ADDR", "127.0.0.1"},        {"MASTER_PORT", std::to_string(port)}};
  };
  b.rank(901, 0, 1 * kGiB, master_env(0, 29500));
  b.rank(902, 1, 1 * kGiB, master_env(1, 29500));
  b.rank(911, 2, 3 * kGiB, master_env(1, 29600));
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].group->master_port, 29600);
  EXPECT_EQ(survivor_pids(found[0]), std::vector<pid_t>{911});

  // Two pods with the same localhost master and run id "none" are two jobs.
  Builder c;
  c.rank(921, 0, 1 * kGiB, torchrun_env(0, 0, 2, 2, "none"), in_pod("a", "uid-a"));
  c.rank(922, 1, 1 * kGiB, torchrun_env(1, 1, 2, 2, "none"), in_pod("a", "uid-a"));
  c.rank(932, 3, 1 * kGiB, torchrun_env(1, 1, 2, 2, "none"), in_pod("b", "uid-b"));
  auto pods = nccl(c.build());
  ASSERT_EQ(pods.size(), 1U);
  EXPECT_EQ(pods[0].group->scope, "pod uid-b");
  EXPECT_NE(pods[0].advice.find("Delete the pod ml/b now to free 1.0 GiB"), std::string::npos)
      << pods[0].advice;
}

TEST(NcclMissingRank, ForkedHelpersCarryingTheRankEnvAreNotRanks) {
  Builder b;
  auto env1 = torchrun_env(1, 1, 2, 2, "job-h");
  b.rank(1001, 1, 1 * kGiB, env1);
  // A DataLoader worker forked by rank 1 inherits its descriptors and environment.
  auto helper = process(1002, 1001, "pt_data_worker", env1);
  helper.gpu_fds = {{"nvidia1", 2}};
  b.add(helper);
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(survivor_pids(found[0]), std::vector<pid_t>{1001});
  EXPECT_EQ(found[0].group->missing_local_ranks, std::vector<int>{0});
}

TEST(NcclMissingRank, SurvivorMemoryUnknownStillCountsWithAGpuDescriptor) {
  Builder b;
  b.rank(1101, 1, std::nullopt, torchrun_env(1, 1, 2, 2, "job-nonvml"));
  auto found = nccl(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_FALSE(found[0].group->survivors[0].gpu_memory.has_value());
  EXPECT_NE(found[0].message.find("memory n/a"), std::string::npos);
}

TEST(NcclMissingRank, DetectAllIncludesItAndJsonCarriesTheGroup) {
  Builder b;
  const Env off = {{"TORCH_NCCL_ASYNC_ERROR_HANDLING", "0"}};
  b.rank(201, 1, 2900 * kMiB, torchrun_env(1, 1, 3, 3, "job-a", off));
  b.rank(202, 2, 2900 * kMiB, torchrun_env(2, 2, 3, 3, "job-a", off));
  const NodeSnapshot snap = b.build();
  auto all = gpureap::findings::detect_all(snap);
  auto it = std::find_if(all.begin(), all.end(), [](const Finding& f) { return f.kind == Kind::nccl_missing_rank; });
  ASSERT_NE(it, all.end());
  EXPECT_TRUE(gpureap::findings::fails_check(all));
  EXPECT_EQ(gpureap::findings::to_string(Kind::nccl_missing_rank), "nccl_missing_rank");

  auto doc = gpureap::report::trace_json(snap, all);
  const nlohmann::json* nf = nullptr;
  for (const auto& f : doc["findings"]) {
    if (f["kind"] == "nccl_missing_rank") nf = &f;
  }
  ASSERT_NE(nf, nullptr);
  const auto& g = (*nf)["group"];
  EXPECT_EQ((*nf)["severity"], "critical");
  EXPECT_EQ(g["run_id"], "job-a");
  EXPECT_EQ(g["master_addr"], "10.0.0.5");
  EXPECT_EQ(g["master_port"], 29500);
  EXPECT_EQ(g["world_size"], 3);
  EXPECT_EQ(g["local_world_size"], 3);
  EXPECT_EQ(g["missing_local_ranks"], nlohmann::json::array({0}));
  EXPECT_EQ(g["present_local_ranks"], nlohmann::json::array({1, 2}));
  EXPECT_EQ(g["survivor_memory"], 5800 * kMiB);
  EXPECT_EQ(g["watchdog"], "hang");
  ASSERT_EQ(g["survivors"].size(), 2U);
  EXPECT_EQ(g["survivors"][0]["pid"], 201);
  EXPECT_EQ(g["survivors"][0]["gpu_memory"], 2900 * kMiB);
  EXPECT_EQ(g["survivors"][0]["watchdog"], "hang");
  EXPECT_EQ(g["survivors"][0]["gpus"], nlohmann::json::array({1}));
  EXPECT_TRUE(g["group_rank"].is_null());
  // Other findings carry no group.
  for (const auto& f : doc["findings"]) {
    if (f["kind"] != "nccl_missing_rank") {
      EXPECT_FALSE(f.contains("group"));
    }
  }
}

}  // namespace
