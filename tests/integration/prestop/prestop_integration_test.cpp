// gpureap prestop inside real PID namespaces (unshare --pid --fork --mount-proc,
// so /proc is the namespace's) with the simulated GPU: the plan's scenario 3
// (TERM-ignoring worker: the fallback SIGKILL fires) and 4 (TERM-handling
// worker: no kill), a non-GPU process left alone, PID 1 never signalled, a
// nested namespace's GPU user never signalled, an empty container a no-op, and
// a /proc that is not ours refused. prestop_ns_helper is each namespace's PID 1;
// when it exits the kernel ends whatever is left in the namespace.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

using gpureap::testing::Child;
using gpureap::testing::TempDir;
using nlohmann::json;

const std::string kGpureap = GPUREAP_BIN;
const std::string kWorker = GPUREAP_WORKER_BIN;
const std::string kHelper = PRESTOP_NS_HELPER_BIN;

struct NsRun {
  json result;                      // the helper's report
  json prestop;                     // prestop's --json document
  std::vector<std::string> pid1_log;  // lines prestop wrote to /proc/1/fd/1 (what kubectl logs shows)
};

class PrestopNamespace : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "integration tests need root (PID namespaces)";
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    env_ = {"GPUREAP_SIM_DIR=" + tmp_ / "sim"};
    auto init = gpureap::testing::run({kWorker, "init-sim", "--devices", "1"}, env_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }
  void TearDown() override {
    // Reap anything reparented to us (only our own descendants can be).
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }

  static json hold(const std::string& term_mode = "") {
    std::vector<std::string> argv = {kWorker, "hold", "--gpu", "sim", "--device", "0", "--bytes", "256M"};
    if (!term_mode.empty()) argv.push_back(term_mode);
    return {{"argv", argv}};
  }

  // Runs the scenario in a fresh PID namespace; prestop gets `prestop_args`.
  // `pid1_cgroup_procs`: a cgroup.procs file PID 1 joins before starting anything.
  NsRun run_in_namespace(json workers, const std::vector<std::string>& prestop_args, bool pid1_gpu = false,
                         const std::string& pid1_cgroup_procs = "") {
    std::vector<std::string> prestop = {kGpureap, "prestop", "--gpu", "sim", "--json"};
    prestop.insert(prestop.end(), prestop_args.begin(), prestop_args.end());
    json config = {{"pid1_gpu", pid1_gpu}, {"workers", workers}, {"prestop", prestop}, {"out_dir", tmp_.path()}};
    if (!pid1_cgroup_procs.empty()) config["cgroup_procs"] = pid1_cgroup_procs;
    Child ns = Child::spawn({"/usr/bin/unshare", "--pid", "--fork", "--mount-proc", "--kill-child", kHelper,
                             config.dump()},
                            env_);
    NsRun out;
    while (auto line = ns.read_line()) {
      if (line->rfind("{\"", 0) == 0 && line->find("\"result\":true") != std::string::npos) {
        out.result = json::parse(*line, nullptr, false);
        break;
      }
      out.pid1_log.push_back(*line);
    }
    EXPECT_TRUE(out.result.is_object()) << "the namespace's PID 1 gave no report";
    const int status = ns.wait_exit();
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    if (out.result.is_object()) {
      out.prestop = json::parse(out.result["prestop_out"].get<std::string>(), nullptr, false);
      EXPECT_TRUE(out.prestop.is_object()) << out.result.dump(2);
    }
    return out;
  }

  static int prestop_exit(const NsRun& r) {
    const auto& p = r.result["prestop"];
    return p["state"] == "exited" ? p["code"].get<int>() : -1;
  }

  static bool logged(const NsRun& r, const std::string& needle) {
    for (const auto& l : r.pid1_log) {
      if (l.find(needle) != std::string::npos) return true;
    }
    return false;
  }

  TempDir tmp_;
  std::vector<std::string> env_;
};

TEST_F(PrestopNamespace, TermIgnoringWorkerIsKilledWhenTheTermWaitEnds) {  // plan scenario 3
  auto r = run_in_namespace(json::array({hold("--ignore-term")}), {"--deadline", "2", "--term-wait", "1"});
  ASSERT_TRUE(r.prestop.is_object());
  EXPECT_EQ(prestop_exit(r), 0) << r.result["prestop_err"];
  EXPECT_EQ(r.result["workers"][0]["end"], json({{"state", "signaled"}, {"signal", SIGKILL}}));
  ASSERT_EQ(r.prestop["targets"].size(), 1U) << r.prestop.dump(2);
  const auto& t = r.prestop["targets"][0];
  EXPECT_EQ(t["pid"], r.result["workers"][0]["pid"]);
  EXPECT_EQ(t["outcome"], "killed");
  EXPECT_TRUE(t["term_sent"].get<bool>());
  EXPECT_TRUE(t["kill_sent"].get<bool>());
  EXPECT_GE(t["term_to_kill_s"].get<double>(), 1.0);
  EXPECT_LT(t["term_to_kill_s"].get<double>(), 1.5);
  EXPECT_EQ(t["memory_released"], true);
  EXPECT_GE(t["term_to_release_s"].get<double>(), t["term_to_exit_s"].get<double>());
  EXPECT_EQ(t["driver_pids"], json::array({t["pid"]}));  // the sim lists it under its local pid
  EXPECT_LT(r.prestop["total_s"].get<double>(), 2.0);  // the deadline, by the hook's own clock
  // The wall adds the hook's start, which ASan on a busy machine stretches.
  EXPECT_LT(r.result["prestop_wall_s"].get<double>(), 3.0);
  EXPECT_TRUE(logged(r, "SIGTERM ignored for")) << r.result["prestop_err"];
  EXPECT_TRUE(r.result["pid1_pending"].empty());
}

TEST_F(PrestopNamespace, TermHandlingWorkerExitsWithoutAKill) {  // plan scenario 4
  auto r = run_in_namespace(json::array({hold("--term-cleanup")}), {"--deadline", "2", "--term-wait", "1"});
  ASSERT_TRUE(r.prestop.is_object());
  EXPECT_EQ(prestop_exit(r), 0) << r.result["prestop_err"];
  EXPECT_EQ(r.result["workers"][0]["end"], json({{"state", "exited"}, {"code", 0}}));
  ASSERT_EQ(r.prestop["targets"].size(), 1U);
  const auto& t = r.prestop["targets"][0];
  EXPECT_EQ(t["outcome"], "exited");
  EXPECT_FALSE(t["kill_sent"].get<bool>());
  EXPECT_EQ(t["memory_released"], true);
  EXPECT_LT(t["term_to_release_s"].get<double>(), 1.0);
  EXPECT_EQ(r.prestop["summary"]["killed"], 0);
  EXPECT_LT(r.prestop["total_s"].get<double>(), 1.0);
  EXPECT_TRUE(logged(r, ": SIGTERM; exited after")) << r.result["prestop_err"];
}

TEST_F(PrestopNamespace, ProcessThatIsNotAGpuUserIsLeftAlone) {
  json bystander = {{"argv", {kWorker, "spawn-tree", "--children", "1"}}};
  auto r = run_in_namespace(json::array({bystander, hold()}), {"--deadline", "2", "--term-wait", "1"});
  ASSERT_TRUE(r.prestop.is_object());
  EXPECT_EQ(prestop_exit(r), 0) << r.result["prestop_err"];
  EXPECT_EQ(r.result["workers"][0]["end"]["state"], "alive");
  EXPECT_EQ(r.result["workers"][1]["end"], json({{"state", "signaled"}, {"signal", SIGTERM}}));
  ASSERT_EQ(r.prestop["targets"].size(), 1U);
  EXPECT_EQ(r.prestop["targets"][0]["pid"], r.result["workers"][1]["pid"]);
  for (const auto& s : r.prestop["skipped"]) EXPECT_NE(s["pid"], r.result["workers"][0]["pid"]);
}

TEST_F(PrestopNamespace, Pid1IsNeverSignalledEvenWhenItUsesTheGpu) {
  auto r = run_in_namespace(json::array({hold()}), {"--deadline", "2", "--term-wait", "1"}, /*pid1_gpu=*/true);
  ASSERT_TRUE(r.prestop.is_object());
  EXPECT_EQ(prestop_exit(r), 0) << r.result["prestop_err"];
  EXPECT_TRUE(r.result["pid1_pending"].empty()) << r.result["pid1_pending"];
  ASSERT_EQ(r.prestop["targets"].size(), 1U);
  EXPECT_NE(r.prestop["targets"][0]["pid"], 1);
  bool pid1_skipped = false;
  for (const auto& s : r.prestop["skipped"]) pid1_skipped = pid1_skipped || (s["pid"] == 1 && s["reason"] == "pid1");
  EXPECT_TRUE(pid1_skipped) << r.prestop["skipped"].dump(2);
  EXPECT_TRUE(logged(r, "pid 1 (")) << r.result["prestop_err"];
}

TEST_F(PrestopNamespace, GpuUserOfANestedPidNamespaceIsNotSignalled) {
  json nested = {{"argv", {"/usr/bin/unshare", "--pid", "--fork", "--kill-child", kWorker, "hold", "--gpu", "sim",
                           "--device", "0", "--bytes", "128M"}}};
  auto r = run_in_namespace(json::array({nested}), {"--deadline", "2", "--term-wait", "1"});
  ASSERT_TRUE(r.prestop.is_object());
  EXPECT_EQ(prestop_exit(r), 0) << r.result["prestop_err"];
  EXPECT_EQ(r.result["workers"][0]["end"]["state"], "alive");
  EXPECT_TRUE(r.prestop["targets"].empty()) << r.prestop.dump(2);
  bool other_ns = false;
  for (const auto& s : r.prestop["skipped"]) other_ns = other_ns || s["reason"] == "other_pid_namespace";
  EXPECT_TRUE(other_ns) << r.prestop["skipped"].dump(2);
}

TEST_F(PrestopNamespace, InAContainerOnlyItsOwnContainersProcessesAreSignalled) {
  // Two kubelet-named containers of one pod sharing a PID namespace
  // (shareProcessNamespace): the hook runs in "worker"; the sidecar's GPU user is not its.
  const auto v1 = gpureap::testing::cgroup_v1_memory_mount();
  const auto v2 = gpureap::testing::cgroup_v2_mount();
  ASSERT_TRUE(v1 || v2) << "no cgroup hierarchy mounted";
  const std::string mount = v1 ? *v1 : *v2;
  const std::string pod = "/kubepods/burstable/pod" + gpureap::testing::random_uuid();
  const std::string id_ours = gpureap::testing::random_hex(64);
  const std::string id_sidecar = gpureap::testing::random_hex(64);
  gpureap::testing::Cgroup ours(mount, pod + "/" + id_ours);
  gpureap::testing::Cgroup sidecar(mount, pod + "/" + id_sidecar);
  json side = hold();
  side["cgroup_procs"] = mount + sidecar.path() + "/cgroup.procs";
  auto r = run_in_namespace(json::array({hold(), side}), {"--deadline", "2", "--term-wait", "1"}, false,
                            mount + ours.path() + "/cgroup.procs");
  ASSERT_TRUE(r.prestop.is_object());
  EXPECT_EQ(prestop_exit(r), 0) << r.result["prestop_err"];
  EXPECT_EQ(r.prestop["self"]["container_id"], id_ours);
  EXPECT_EQ(r.result["workers"][0]["end"], json({{"state", "signaled"}, {"signal", SIGTERM}}));
  EXPECT_EQ(r.result["workers"][1]["end"]["state"], "alive");
  ASSERT_EQ(r.prestop["targets"].size(), 1U);
  EXPECT_EQ(r.prestop["targets"][0]["pid"], r.result["workers"][0]["pid"]);
  bool other = false;
  for (const auto& s : r.prestop["skipped"]) {
    other = other || (s["pid"] == r.result["workers"][1]["pid"] && s["reason"] == "other_container");
  }
  EXPECT_TRUE(other) << r.prestop["skipped"].dump(2);
}

TEST_F(PrestopNamespace, EmptyContainerIsACleanNoOp) {
  auto r = run_in_namespace(json::array(), {"--deadline", "2", "--term-wait", "1"});
  ASSERT_TRUE(r.prestop.is_object());
  EXPECT_EQ(prestop_exit(r), 0) << r.result["prestop_err"];
  EXPECT_TRUE(r.prestop["targets"].empty());
  EXPECT_EQ(r.prestop["exit_code"], 0);
  EXPECT_LT(r.prestop["total_s"].get<double>(), 1.0);
  EXPECT_TRUE(logged(r, "start: 0 target(s)"));
  EXPECT_TRUE(logged(r, "done in"));
}

TEST_F(PrestopNamespace, RefusesAProcThatIsNotItsNamespaces) {
  // A new PID namespace without its own /proc: pids read there are not ours.
  auto r = gpureap::testing::run({"/usr/bin/unshare", "--pid", "--fork", "--kill-child", kGpureap, "prestop",
                                  "--gpu", "sim", "--deadline", "1"},
                                 env_);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("not this PID namespace's /proc"), std::string::npos) << r.err;

  // With --json the refusal is a report on stdout too, naming why.
  auto j = gpureap::testing::run({"/usr/bin/unshare", "--pid", "--fork", "--kill-child", kGpureap, "prestop",
                                  "--gpu", "sim", "--deadline", "1", "--json"},
                                 env_);
  EXPECT_EQ(j.exit_code, 2) << j.err;
  const json doc = json::parse(j.out, nullptr, false);
  ASSERT_FALSE(doc.is_discarded()) << j.out;
  EXPECT_EQ(doc["exit_code"], 2);
  EXPECT_EQ(doc["command"], "prestop");
  EXPECT_TRUE(doc["targets"].empty());
  EXPECT_NE(doc["error"].get<std::string>().find("not this PID namespace's /proc"), std::string::npos) << j.out;
}

}  // namespace
