// gpureap lab --quick, end to end: real PID namespaces and kubelet-named
// cgroups (the built-in runtime) or a real runc container, the simulated GPU,
// every scenario at once. Each scenario's outcome is asserted from its
// measurements.json; comparison.md's numbers against those files; timeline.svg
// for well-formedness (xmllint) and one series per scenario that ran.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "test_support.hpp"

namespace {

using gpureap::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

const std::string kGpureap = GPUREAP_BIN;

// The suite's sanitizer builds instrument gpureap too: each exec of it (the
// preStop hook's) then takes most of a second before it does anything.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kProductIsInstrumented = true;
#else
constexpr bool kProductIsInstrumented = false;
#endif

struct LabRun {
  gpureap::testing::RunResult result;
  std::string out;
  std::map<std::string, json> m;  // instance → measurements.json
  json run;
};

LabRun run_lab(const TempDir& tmp, const std::vector<std::string>& extra) {
  LabRun r;
  r.out = tmp / "lab";
  std::vector<std::string> argv = {kGpureap, "lab", "--quick", "--gpu", "sim", "--out", r.out};
  argv.insert(argv.end(), extra.begin(), extra.end());
  r.result = gpureap::testing::run(argv);
  for (const auto& e : fs::directory_iterator(r.out)) {
    const fs::path mj = e.path() / "measurements.json";
    if (e.is_directory() && fs::exists(mj)) {
      r.m[e.path().filename().string()] = json::parse(gpureap::testing::read_file(mj.string()));
    }
  }
  if (fs::exists(r.out + "/run.json"))
    r.run = json::parse(gpureap::testing::read_file(r.out + "/run.json"));
  return r;
}

double num(const json& j) {
  return j.is_number() ? j.get<double>() : std::nan("");
}

// Assertions every scenario that ran must meet, whatever its fix.
void expect_clean_end(const std::string& name, const json& m) {
  SCOPED_TRACE(name);
  EXPECT_TRUE(m["error"].is_null()) << m["error"];
  EXPECT_EQ(m["survivors_after_delete"], 0);
  EXPECT_EQ(m["gpu_bytes_after_delete"], 0);
  EXPECT_FALSE(m["gpu_release_after_delete_s"].is_null());
  EXPECT_GT(m["gpu_bytes_at_delete"].get<std::uint64_t>(), 0U);
  EXPECT_FALSE(m["driver_version"].get<std::string>().empty());
  for (const char* key : {"scenario", "driver_version", "zombies", "orphans", "orphaned_contexts",
                          "term_reached_worker", "gpu_release_after_delete_s",
                          "gpu_gib_seconds_during_termination", "survivors_after_delete"}) {
    EXPECT_TRUE(m.contains(key)) << key;
  }
  // Every step ran observe (while the pod lived) and trace, and trace named the pod.
  bool named = false;
  for (const auto& s : m["steps"]) {
    EXPECT_TRUE(s["error"].is_null()) << s.dump();
    EXPECT_FALSE(s["trace"].is_null());
    named = named || s["trace"]["pod_named"].get<bool>();
    if (s["step"] != "after-delete") {
      EXPECT_FALSE(s["observe"].is_null()) << s["step"];
    }
  }
  EXPECT_TRUE(named);
}

// The outcomes the plan's scenarios must show (docs/lab.md says why).
void expect_scenario_outcomes(const LabRun& r, bool with_variants, bool exec_is_fast) {
  const auto& m = r.m;
  for (const char* s : {"S1", "S2", "S3", "S4", "S5", "S6"}) {
    ASSERT_TRUE(m.count(s)) << s;
    expect_clean_end(s, m.at(s));
  }
  // Zombies only where PID 1 is not an init.
  EXPECT_GE(m.at("S1")["zombies"].get<int>(), 1);
  for (const char* s : {"S2", "S3", "S4", "S5", "S6"}) EXPECT_EQ(m.at(s)["zombies"], 0) << s;
  // Orphans everywhere: the parent exits without wait() in every scenario.
  for (const char* s : {"S1", "S2", "S3", "S4", "S5", "S6"})
    EXPECT_GE(m.at(s)["orphans"].get<int>(), 1) << s;
  // SIGTERM reaches (and is acted on by) the worker only where it has a handler.
  for (const char* s : {"S1", "S2", "S3", "S5", "S6"})
    EXPECT_FALSE(m.at(s)["term_reached_worker"].get<bool>()) << s;
  EXPECT_TRUE(m.at("S4")["term_reached_worker"].get<bool>());

  const auto release = [&](const char* s) { return num(m.at(s)["gpu_release_after_delete_s"]); };
  const auto grace = [&](const char* s) { return num(m.at(s)["grace_s"]); };
  // S1: held through the whole grace, freed by the runtime's SIGKILL of PID 1.
  EXPECT_GE(release("S1"), grace("S1") * 0.95);
  const auto event = [&](const char* s, const char* key) { return num(m.at(s)["deletion"][key]); };
  // Timing is asserted as the order of events, with the slack of the driver's
  // release and the 10 ms samples: under ASan on a busy machine an exec alone
  // (the preStop hook's, runc's) can take a second, which is not what is tested.
  constexpr double kSlack = 1.0;
  EXPECT_FALSE(m.at("S1")["deletion"]["kill_pid1_s"].is_null());
  EXPECT_GE(release("S1"), event("S1", "kill_pid1_s"));
  EXPECT_LE(release("S1"), event("S1", "kill_pid1_s") + kSlack);
  // S2: tini exits when its child (sleep) does, so the namespace ends at once
  // and the kernel SIGKILLs the orphaned worker: fast, but no cleanup ran.
  EXPECT_TRUE(m.at("S2")["deletion"]["kill_pid1_s"].is_null());
  EXPECT_EQ(m.at("S2")["deletion"]["pid1_status"], 143);
  EXPECT_LT(event("S2", "pid1_exited_s"), grace("S2") / 2);
  EXPECT_LE(release("S2"), event("S2", "pid1_exited_s") + kSlack);
  // S3: held until the preStop hook's SIGKILL, after its SIGTERM wait, and
  // freed before the kubelet's SIGTERM to PID 1.
  const double term_wait = num(m.at("S3")["prestop_term_wait_s"]);
  EXPECT_GE(release("S3"), term_wait * 0.95);
  EXPECT_LE(release("S3"), event("S3", "prestop_ended_s") + kSlack);
  EXPECT_LE(release("S3"), event("S3", "term_pid1_s") + kSlack);
  EXPECT_NE(m.at("S3")["release_cause"].get<std::string>().find("preStop hook's SIGKILL"),
            std::string::npos);
  // S4: the worker's handler frees it within a second of its SIGTERM (and, where
  // an exec takes milliseconds, within a second of the deletion's start) ...
  EXPECT_LE(release("S4"), num(m.at("S4")["term_reached_worker_s"]) + kSlack);
  if (exec_is_fast) {
    EXPECT_LT(release("S4"), 1.0);
  }
  // ... and the hook's SIGTERM sufficed: its own report shows the worker
  // exited and nothing needed the SIGKILL fallback.
  const json hook = json::parse(gpureap::testing::read_file(r.out + "/S4/prestop.json"));
  EXPECT_EQ(hook["summary"]["killed"], 0) << hook["summary"];
  EXPECT_GE(hook["summary"]["exited"].get<int>(), 1) << hook["summary"];
  if (exec_is_fast) {
    EXPECT_LT(event("S4", "prestop_ended_s"), num(m.at("S4")["prestop_term_wait_s"]));
  }
  // S5: gpureap-init bounds it by --gpu-grace after the SIGTERM to PID 1.
  const double gpu_grace = num(m.at("S5")["init_gpu_grace_s"]);
  EXPECT_GE(release("S5"), gpu_grace * 0.95);
  EXPECT_LE(release("S5"), event("S5", "term_pid1_s") + gpu_grace + kSlack);
  EXPECT_TRUE(m.at("S5")["init_escalated"].get<bool>());
  // S6: the creator's death leaves an orphaned context that trace pins on the forked children.
  const auto& s6 = m.at("S6");
  EXPECT_GE(s6["orphaned_contexts"].get<int>(), 1);
  ASSERT_EQ(s6["forked_children"].size(), 2U) << s6.dump();
  for (const auto& child : s6["forked_children"]) {
    const auto& holders = s6["orphaned_context_holders"];
    EXPECT_NE(std::find(holders.begin(), holders.end(), child), holders.end())
        << child << " in " << holders;
  }
  for (const char* s : {"S1", "S2", "S3", "S4", "S5"}) {
    EXPECT_EQ(m.at(s)["orphaned_contexts"], 0) << s;
  }
  // While the creator lived, trace warned that its children share its context.
  EXPECT_GE(s6["latent_orphaned_contexts"].get<int>(), 1);
  // The children hold the context without being listed: hidden from nvidia-smi.
  EXPECT_GE(s6["hidden_holders"].get<int>(), 2);
  // What the fixes buy: S1 wastes more than S4 and S5. (Between S3 and the
  // others the order depends on exec times --quick does not scale.)
  const auto gibs = [&](const char* s) {
    return num(m.at(s)["gpu_gib_seconds_during_termination"]);
  };
  if (exec_is_fast) {
    EXPECT_GT(gibs("S1"), gibs("S4"));
  } else {
    // S4's SIGTERM comes from the preStop hook's exec, which --quick does not
    // scale: under runc on a loaded machine it arrived after S1's whole 3 s
    // grace (CI, 2026-12-05: 6.3 against 6.0 GiB·s). What S4 must still show
    // is that nothing was held past its SIGTERM.
    const double gib_at_delete = num(m.at("S4")["gpu_bytes_at_delete"]) / double(1ULL << 30);
    EXPECT_LE(gibs("S4"), gib_at_delete * (num(m.at("S4")["term_reached_worker_s"]) + kSlack));
  }
  EXPECT_GT(gibs("S1"), gibs("S5"));

  if (!with_variants) return;
  ASSERT_TRUE(m.count("S7"));
  EXPECT_FALSE(m.at("S7")["not_run"].is_null());
  EXPECT_NE(m.at("S7")["not_run"].get<std::string>().find("needs ≥ 2 GPUs"), std::string::npos);
  ASSERT_TRUE(m.count("S1-w10"));
  expect_clean_end("S1-w10", m.at("S1-w10"));
  EXPECT_EQ(m.at("S1-w10")["zombies"], 10);
  EXPECT_EQ(m.at("S1-w10")["gpu_bytes_at_delete"], 10 * (2ULL << 30));
  ASSERT_TRUE(m.count("S1-uid1000"));
  expect_clean_end("S1-uid1000", m.at("S1-uid1000"));
  EXPECT_GE(release("S1-uid1000"), grace("S1-uid1000") * 0.95);
}

// The workers of a scenario ran as the user asked for (trace's uid of the pod's GPU process).
void expect_worker_uid(const LabRun& r, const std::string& instance, unsigned uid) {
  const json trace =
      json::parse(gpureap::testing::read_file(r.out + "/" + instance + "/trace-after-spawn.json"));
  const std::string pod = r.m.at(instance)["pod"];
  bool seen = false;
  for (const auto& p : trace["processes"]) {
    if (!p["pod"].is_object() || p["pod"]["name"] != pod || p["gpu_memory"].is_null()) continue;
    EXPECT_EQ(p["uid"], uid) << p.dump();
    seen = true;
  }
  EXPECT_TRUE(seen) << "no GPU process of " << pod << " in trace-after-spawn.json";
}

// comparison.md's GiB·s table gives each scenario's release and GiB·s as its
// measurements.json does (two decimals).
void expect_comparison_matches(const LabRun& r) {
  const std::string md = gpureap::testing::read_file(r.out + "/comparison.md");
  const std::regex row(
      R"(^\| (S\d(?:-[a-z0-9]+)?) \| [^|]* \| (\d+) \| (\d+) \| ([0-9.]+) GiB \| ([0-9.]+) s \| ([0-9.]+) \|)");
  std::set<std::string> rows;
  std::istringstream lines(md);
  for (std::string line; std::getline(lines, line);) {
    std::smatch g;
    if (!std::regex_search(line, g, row)) continue;
    const std::string inst = g[1];
    ASSERT_TRUE(r.m.count(inst)) << inst;
    const json& m = r.m.at(inst);
    rows.insert(inst);
    EXPECT_EQ(std::stoi(g[2]), m["variant"]["workers"].get<int>()) << line;
    EXPECT_EQ(std::stoi(g[3]), m["variant"]["uid"].get<int>()) << line;
    EXPECT_NEAR(std::stod(g[4]), m["gpu_bytes_at_delete"].get<double>() / (1ULL << 30), 0.005)
        << line;
    EXPECT_NEAR(std::stod(g[5]), num(m["gpu_release_after_delete_s"]), 0.0051) << line;
    EXPECT_NEAR(std::stod(g[6]), num(m["gpu_gib_seconds_during_termination"]), 0.0051) << line;
  }
  for (const auto& [inst, m] : r.m) {
    if (m["not_run"].is_null()) {
      EXPECT_TRUE(rows.count(inst)) << inst << " has no row in comparison.md";
    }
  }
  // The plan's guesses against the measurements: S2 is not what it expected.
  const auto row_of = [&](const std::string& inst) {
    const auto at = md.find("| " + inst + " | ", md.find("## Against the plan's expectations"));
    return at == std::string::npos ? std::string() : md.substr(at, md.find('\n', at) - at);
  };
  EXPECT_NE(row_of("S1").find("as expected"), std::string::npos) << md;
  EXPECT_NE(row_of("S2").find("not as expected"), std::string::npos) << md;
  // The plan's Phase 3 table is there, with a column per scenario.
  EXPECT_NE(md.find("## The plan's Phase 3 table, measured"), std::string::npos);
  EXPECT_NE(md.find("| Zombies reaped |"), std::string::npos);
}

void expect_timeline(const LabRun& r) {
  const std::string svg = r.out + "/timeline.svg";
  auto lint = gpureap::testing::run({"/usr/bin/xmllint", "--noout", svg});
  EXPECT_EQ(lint.exit_code, 0) << lint.err;
  const std::string text = gpureap::testing::read_file(svg);
  std::set<std::string> series;
  const std::regex path(R"re(<path class="series" data-scenario="([^"]+)")re");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), path); it != std::sregex_iterator();
       ++it) {
    EXPECT_TRUE(series.insert((*it)[1]).second) << "two series for " << (*it)[1];
  }
  for (const auto& [inst, m] : r.m) {
    EXPECT_EQ(series.count(inst), m["not_run"].is_null() ? 1U : 0U) << inst;
  }
}

// Nothing of the lab stays on the machine: its node directory and cgroups are gone.
void expect_nothing_left(const LabRun& r) {
  ASSERT_TRUE(r.run.is_object());
  EXPECT_FALSE(fs::exists(r.run["node_root"].get<std::string>()));
  EXPECT_TRUE(r.run["leftovers"].empty()) << r.run["leftovers"];
  const std::string parent = r.run["cgroup_parent"];
  for (const char* mount : {"/sys/fs/cgroup/memory", "/sys/fs/cgroup/unified", "/sys/fs/cgroup",
                            "/sys/fs/cgroup/pids"}) {
    EXPECT_FALSE(fs::exists(std::string(mount) + parent)) << mount << parent;
  }
}

class LabIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "the lab needs root (namespaces, cgroups, runc)";
  }
  TempDir tmp_;
};

TEST_F(LabIntegration, BuiltinRuntimeEveryScenarioAndThePlansVariants) {
  const LabRun r = run_lab(tmp_, {});
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  // The built-in runtime's exec is a clone; the hook's gpureap is fast unless instrumented.
  expect_scenario_outcomes(r, true, !kProductIsInstrumented);
  expect_worker_uid(r, "S1-uid1000", 1000);
  expect_worker_uid(r, "S1", 0);
  expect_comparison_matches(r);
  expect_timeline(r);
  expect_nothing_left(r);
  // The comparison is also the command's output, and the progress went to stderr.
  EXPECT_NE(r.result.out.find("## The plan's Phase 3 table, measured"), std::string::npos);
  EXPECT_NE(r.result.err.find("deleting the pod"), std::string::npos);
  for (const char* f :
       {"observe-after-spawn.log", "observe-after-kill.log", "trace-after-spawn.log",
        "trace-after-kill.log", "trace-after-delete.log", "gpu-before-delete.log",
        "gpu-after-delete.log", "notes.md", "workload.log", "container.log"}) {
    EXPECT_TRUE(fs::exists(r.out + "/S1/" + f)) << f;
  }
  // The pod was named from the runtime's state, as on a containerd node.
  const json trace = json::parse(gpureap::testing::read_file(r.out + "/S1/trace-after-spawn.json"));
  bool from_state = false;
  for (const auto& p : trace["processes"]) {
    if (p["pod"].is_object() && p["pod"]["name"] == "gpu-zombie-nofix") {
      from_state = from_state || (p["container"]["source"] == "containerd" &&
                                  !p["container"]["deleted"].get<bool>());
      EXPECT_EQ(p["pod"]["qos"], "besteffort");
    }
  }
  EXPECT_TRUE(from_state) << trace["processes"].dump(2);
}

TEST_F(LabIntegration, RuncRuntimeEveryScenario) {
  ASSERT_TRUE(fs::exists("/usr/sbin/runc") || fs::exists("/usr/bin/runc"))
      << "runc missing (scripts/install-deps.sh)";
  const LabRun r = run_lab(tmp_, {"--runtime", "runc", "--scenarios", "S1,S2,S3,S4,S5,S6"});
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  EXPECT_EQ(r.m.size(), 6U);
  for (const auto& [inst, m] : r.m) EXPECT_EQ(m["runtime"], "runc") << inst;
  expect_scenario_outcomes(r, false, false);  // runc's exec is a Go program
  expect_comparison_matches(r);
  expect_timeline(r);
  expect_nothing_left(r);
}

TEST_F(LabIntegration, SerialRunGivesTheSameOutcomes) {
  const LabRun r = run_lab(tmp_, {"--serial", "--scenarios", "S1,S4,S6"});
  ASSERT_EQ(r.result.exit_code, 0) << r.result.err;
  expect_clean_end("S1", r.m.at("S1"));
  EXPECT_GE(r.m.at("S1")["zombies"].get<int>(), 1);
  EXPECT_TRUE(r.m.at("S4")["term_reached_worker"].get<bool>());
  EXPECT_GE(r.m.at("S6")["orphaned_contexts"].get<int>(), 1);
  expect_nothing_left(r);
}

TEST_F(LabIntegration, BadOptionsExitTwoAndNameTheValue) {
  auto bad_scenario = gpureap::testing::run(
      {kGpureap, "lab", "--quick", "--scenarios", "S1,S9", "--out", tmp_ / "x"});
  EXPECT_EQ(bad_scenario.exit_code, 2);
  EXPECT_NE(bad_scenario.err.find("'S9'"), std::string::npos) << bad_scenario.err;
  auto bad_variant = gpureap::testing::run(
      {kGpureap, "lab", "--quick", "--scenarios", "S1-x3", "--out", tmp_ / "x"});
  EXPECT_EQ(bad_variant.exit_code, 2);
  EXPECT_NE(bad_variant.err.find("'x3'"), std::string::npos) << bad_variant.err;
  auto torch_on_sim = gpureap::testing::run(
      {kGpureap, "lab", "--workload", "torch", "--gpu", "sim", "--out", tmp_ / "x"});
  EXPECT_EQ(torch_on_sim.exit_code, 2);
  EXPECT_NE(torch_on_sim.err.find("--workload torch"), std::string::npos) << torch_on_sim.err;
  // An output directory that cannot be made: the lab says which and runs nothing.
  gpureap::testing::write_file(tmp_ / "a-file", "");
  auto bad_out = gpureap::testing::run({kGpureap, "lab", "--quick", "--out", tmp_ / "a-file/lab"});
  EXPECT_EQ(bad_out.exit_code, 2);
  EXPECT_NE(bad_out.err.find(tmp_ / "a-file/lab"), std::string::npos) << bad_out.err;
  auto bad_runtime =
      gpureap::testing::run({kGpureap, "lab", "--runtime", "docker", "--out", tmp_ / "x"});
  EXPECT_EQ(bad_runtime.exit_code, 2);
  EXPECT_FALSE(fs::exists(tmp_ / "x")) << "a refused run wrote nothing";
}

TEST_F(LabIntegration, PrintScenariosIsTheTableAsJson) {
  auto r = gpureap::testing::run({kGpureap, "lab", "--print-scenarios"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json doc = json::parse(r.out);
  ASSERT_EQ(doc["scenarios"].size(), 7U);
  EXPECT_EQ(doc["scenarios"][0]["id"], "S1");
  EXPECT_EQ(doc["scenarios"][0]["termination_grace_period_seconds"], 30);
  EXPECT_EQ(doc["scenarios"][2]["prestop"]["term_wait_seconds"], 20);
  EXPECT_EQ(doc["scenarios"][3]["termination_grace_period_seconds"], 90);
  EXPECT_EQ(doc["scenarios"][4]["pid1"], "gpureap-init");
}

}  // namespace
