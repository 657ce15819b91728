// The lab's pure parts: the scenario table and its variants, the kubelet's
// arithmetic, the sampler's accounting, the numbers derived from a series, how
// a release is explained, reading trace/observe JSON for one pod among many,
// and the renderers.
#include <gtest/gtest.h>

#include <regex>

#include "lab/kubelet.hpp"
#include "lab/lab.hpp"
#include "lab/measurements.hpp"
#include "lab/reading.hpp"
#include "lab/sampler.hpp"
#include "lab/scenario.hpp"

namespace {

using namespace gpureap::lab;
using nlohmann::json;

constexpr std::uint64_t kGiBBytes = 1ULL << 30;

TEST(LabScenarios, ThePlansValues) {
  ASSERT_EQ(kScenarios.size(), 7U);
  const auto* s1 = find_scenario("S1");
  ASSERT_NE(s1, nullptr);
  EXPECT_EQ(s1->pid1, Pid1::bash);
  EXPECT_EQ(s1->worker, Worker::ignores_term);
  EXPECT_EQ(s1->grace_s, 30);
  EXPECT_FALSE(s1->has_prestop());
  EXPECT_EQ(find_scenario("S2")->pid1, Pid1::tini);
  EXPECT_EQ(find_scenario("S2")->grace_s, 30);
  EXPECT_EQ(find_scenario("S3")->grace_s, 60);
  EXPECT_EQ(find_scenario("S3")->prestop_term_wait_s, 20);
  EXPECT_EQ(find_scenario("S4")->grace_s, 90);
  EXPECT_EQ(find_scenario("S4")->worker, Worker::cleans_up);
  EXPECT_TRUE(find_scenario("S4")->has_prestop());
  EXPECT_EQ(find_scenario("S5")->pid1, Pid1::gpureap_init);
  EXPECT_LT(find_scenario("S5")->init_gpu_grace_s, find_scenario("S5")->grace_s);
  EXPECT_EQ(find_scenario("S6")->worker, Worker::forks_after_init);
  EXPECT_EQ(find_scenario("S6")->forked_children, 2U);
  EXPECT_EQ(find_scenario("S7")->min_gpus, 2U);
  EXPECT_EQ(find_scenario("S8"), nullptr);
  // The plan's README: S1 measured 30 s, S2 and S3 guessed 30 s, S4 guessed 0.
  EXPECT_EQ(find_scenario("S1")->plan_expected_hold_s, 30);
  EXPECT_EQ(find_scenario("S2")->plan_expected_hold_s, 30);
  EXPECT_EQ(find_scenario("S3")->plan_expected_hold_s, 30);
  EXPECT_EQ(find_scenario("S4")->plan_expected_hold_s, 0);
  EXPECT_LT(find_scenario("S5")->plan_expected_hold_s, 0);
  // The plan's images: S2 and S3 share "tini".
  EXPECT_EQ(find_scenario("S2")->image, find_scenario("S3")->image);
  EXPECT_EQ(pod_name(*s1), "gpu-zombie-nofix");
}

TEST(LabScenarios, Pid1CommandsAreTheImagesEntrypoints) {
  EXPECT_EQ(pid1_command(*find_scenario("S1"), TimeScale{}),
            (std::vector<std::string>{"bash", "-c", "sleep infinity"}));
  EXPECT_EQ(pid1_command(*find_scenario("S2"), TimeScale{}),
            (std::vector<std::string>{"tini", "--", "sleep", "infinity"}));
  EXPECT_EQ(pid1_command(*find_scenario("S5"), TimeScale{}),
            (std::vector<std::string>{"gpureap-init", "--gpu-grace", "2", "--grace", "20", "--",
                                      "sleep", "infinity"}));
  // --quick scales the init's deadlines with every other one.
  EXPECT_EQ(pid1_command(*find_scenario("S5"), TimeScale{0.1})[2], "0.2");
  EXPECT_EQ(seconds_text(0.25), "0.25");
  EXPECT_EQ(seconds_text(30), "30");
}

TEST(LabScenarios, InstancesAndVariants) {
  auto one = parse_instance("S1-w10-uid1000", 1, 0);
  ASSERT_TRUE(one) << one.error().message;
  EXPECT_EQ(one->def->id, "S1");
  EXPECT_EQ(one->workers, 10U);
  EXPECT_EQ(one->uid, 1000U);
  EXPECT_EQ(one->name, "S1-w10-uid1000");
  // A suffix equal to the run's default names nothing new.
  auto same = parse_instance("S2-w3", 3, 0);
  ASSERT_TRUE(same);
  EXPECT_EQ(same->name, "S2");

  auto list = parse_instances("S1,S4,S1-w10", 1, 0);
  ASSERT_TRUE(list);
  ASSERT_EQ(list->size(), 3U);
  EXPECT_EQ((*list)[2].name, "S1-w10");

  for (const char* bad : {"S9", "X1", "S1-w0", "S1-w65", "S1-uidx", "S1-x3", ""}) {
    auto r = parse_instances(bad, 1, 0);
    EXPECT_FALSE(r) << bad;
  }
  auto dup = parse_instances("S1,S1", 1, 0);
  ASSERT_FALSE(dup);
  EXPECT_NE(dup.error().message.find("twice"), std::string::npos);
  EXPECT_NE(parse_instances("S9", 1, 0).error().message.find("'S9'"), std::string::npos);

  auto all = default_instances(1, 0);
  ASSERT_EQ(all.size(), 9U);
  EXPECT_EQ(all[7].name, "S1-w10");
  EXPECT_EQ(all[7].workers, 10U);
  EXPECT_EQ(all[8].name, "S1-uid1000");
  EXPECT_EQ(all[8].uid, 1000U);
  // When the run's default already is a variant, it is not added twice.
  EXPECT_EQ(default_instances(10, 1000).size(), 7U);
}

TEST(LabScenarios, TableAsJson) {
  const json doc = scenarios_json();
  ASSERT_EQ(doc["scenarios"].size(), 7U);
  EXPECT_EQ(doc["scenarios"][2]["pod"], "gpu-zombie-tini-prestop");
  EXPECT_EQ(doc["scenarios"][2]["image_tag"], "tini");
  EXPECT_TRUE(doc["scenarios"][0]["prestop"].is_null());
  EXPECT_EQ(doc["scenarios"][4]["gpureap_init"]["gpu_grace_seconds"], 2);
  // The worker command the charts' pods carry is the lab's own.
  const auto argv = doc["scenarios"][5]["worker_argv"].get<std::vector<std::string>>();
  EXPECT_EQ(argv,
            worker_command(kScenarios[5], "gpureap-worker-dynamic", 1, "cuda", 0, TimeScale{}));
  EXPECT_EQ(argv[8], "fork-after-init");
  EXPECT_EQ(doc["scenarios"][3]["worker_argv"][9], "--term-cleanup");
  // S3's hook: TERM, 20 s, KILL, done 2 s before its 60 s grace ends.
  EXPECT_EQ(doc["scenarios"][2]["prestop"]["argv"],
            json({"gpureap", "prestop", "--gpu", "nvml", "--term-wait", "20", "--deadline", "58",
                  "--json"}));
}

TEST(LabKubelet, RemainingGraceHasTheFloor) {
  EXPECT_DOUBLE_EQ(remaining_grace(30, 0, 2), 30);
  EXPECT_DOUBLE_EQ(remaining_grace(60, 20.5, 2), 39.5);
  EXPECT_DOUBLE_EQ(remaining_grace(30, 29.5, 2), 2);  // the hook ate the grace: 2 s still
  EXPECT_DOUBLE_EQ(remaining_grace(3, 5, 0.2), 0.2);
}

gpureap::gpu::GpuSnapshot two_devices() {
  gpureap::gpu::GpuSnapshot snap;
  for (unsigned i = 0; i < 2; ++i) {
    gpureap::gpu::GpuDevice d;
    d.index = i;
    d.memory = gpureap::gpu::GpuMemory{100 * kGiBBytes, (i + 1) * kGiBBytes, 0};
    d.processes = {{100 + i, (i + 1) * kGiBBytes}};
    snap.devices.push_back(d);
  }
  snap.devices[1].processes.push_back({300, std::nullopt});  // "not available" counts nothing
  return snap;
}

TEST(LabSampler, AttributionByDeviceOrByProcess) {
  const auto snap = two_devices();
  EXPECT_EQ(attributed_bytes(snap, 0U, {}), kGiBBytes);
  EXPECT_EQ(attributed_bytes(snap, 1U, {100}), 2 * kGiBBytes);  // the device wins over PIDs
  EXPECT_EQ(attributed_bytes(snap, std::nullopt, {101}), 2 * kGiBBytes);
  EXPECT_EQ(attributed_bytes(snap, std::nullopt, {100, 101, 300}), 3 * kGiBBytes);
  EXPECT_EQ(attributed_bytes(snap, std::nullopt, {999}), 0U);
  EXPECT_EQ(attributed_bytes(snap, 7U, {100}), 0U);
}

TEST(LabMeasurements, ReleaseTimeIsTheLastRunOfZeros) {
  EXPECT_FALSE(release_time({}));
  EXPECT_FALSE(release_time({{0, kGiBBytes}, {1, kGiBBytes}}));
  EXPECT_DOUBLE_EQ(*release_time({{0, kGiBBytes}, {0.5, kGiBBytes}, {1.0, 0}, {1.5, 0}}), 1.0);
  // A dip to zero that comes back is not the release.
  EXPECT_DOUBLE_EQ(*release_time({{0, kGiBBytes}, {0.2, 0}, {0.4, kGiBBytes}, {0.6, 0}}), 0.6);
  EXPECT_DOUBLE_EQ(*release_time({{0, 0}, {0.1, 0}}), 0.0);
}

TEST(LabMeasurements, GibSecondsHoldEachSampleUntilTheNext) {
  const std::vector<Sample> s = {
      {0, 2 * kGiBBytes}, {1.0, 2 * kGiBBytes}, {3.0, kGiBBytes}, {4.0, 0}, {5.0, 0}};
  EXPECT_DOUBLE_EQ(gib_seconds(s, std::nullopt), 2 * 1.0 + 2 * 2.0 + 1 * 1.0);
  EXPECT_DOUBLE_EQ(gib_seconds(s, 4.0), 7.0);
  EXPECT_DOUBLE_EQ(gib_seconds(s, 2.0), 4.0);  // cut inside a sample's interval
  EXPECT_DOUBLE_EQ(gib_seconds({}, std::nullopt), 0);
  // Ten 2 GiB workers through a 30 s grace: the plan's order of magnitude.
  EXPECT_NEAR(gib_seconds({{0, 20 * kGiBBytes}, {30.0, 0}}, 30.0), 600.0, 1e-9);
}

Measurements held(double release) {
  Measurements m;
  m.pid1 = "tini";
  m.gpu_bytes_at_delete = 2 * kGiBBytes;
  m.gpu_release_after_delete_s = release;
  return m;
}

TEST(LabMeasurements, ReleaseCauseFromTheEvents) {
  auto m = held(30.05);
  m.deletion.kill_pid1_s = 30.0;
  EXPECT_NE(release_cause(m).find("SIGKILL of PID 1 when the grace ran out"), std::string::npos);

  m = held(0.02);
  m.deletion.pid1_exited_s = 0.01;
  m.deletion.pid1_status = 143;
  EXPECT_NE(release_cause(m).find("PID 1 (tini) exited"), std::string::npos);

  m = held(20.1);
  m.deletion.prestop_started_s = 0;
  m.deletion.prestop_ended_s = 20.05;
  m.deletion.term_pid1_s = 20.06;
  EXPECT_NE(release_cause(m).find("preStop hook's SIGKILL"), std::string::npos);

  m = held(0.3);
  m.term_reached_worker = true;
  m.term_reached_worker_s = 0.01;
  m.deletion.prestop_ended_s = 0.35;
  EXPECT_NE(release_cause(m).find("own SIGTERM handler"), std::string::npos);

  m = held(2.1);
  m.init_escalated = true;
  m.deletion.pid1_exited_s = 2.11;
  EXPECT_NE(release_cause(m).find("gpureap-init"), std::string::npos);

  m = held(0);
  m.gpu_release_after_delete_s.reset();
  EXPECT_NE(release_cause(m).find("never released"), std::string::npos);
  m.gpu_bytes_at_delete = 0;
  EXPECT_NE(release_cause(m).find("nothing was held"), std::string::npos);
}

// A node with two pods' processes: only this pod's findings are its own.
TEST(LabReading, TraceFindingsOfOnePodAmongOthers) {
  const json trace = json::parse(R"({
    "schema": 1,
    "processes": [
      {"pid": 10, "pod": {"name": "gpu-zombie-nofix", "namespace": "gpu-zombie-test", "uid": "u-1", "qos": "besteffort"}},
      {"pid": 20, "pod": {"name": "gpu-zombie-tini", "namespace": "gpu-zombie-test", "uid": "u-2", "qos": "besteffort"}},
      {"pid": 30, "pod": null}
    ],
    "findings": [
      {"kind": "orphan", "severity": "warning", "pid": 10, "gpu": null, "message": "a"},
      {"kind": "orphan", "severity": "warning", "pid": 20, "gpu": null, "message": "b"},
      {"kind": "zombie", "severity": "warning", "pid": 30, "pids": [30, 31], "gpu": null, "message": "c"},
      {"kind": "orphaned_context", "severity": "critical", "pid": 4, "gpu": 3, "message": "d",
       "holders": [{"pid": 11, "comm": "w", "reason": "holds nvidia3"}]},
      {"kind": "orphaned_context", "severity": "critical", "pid": 5, "gpu": 0, "message": "e", "holders": [],
       "related": [{"kind": "hidden_holder", "severity": "warning", "pid": 12, "message": "e1"}]},
      {"kind": "ghost_memory", "severity": "warning", "pid": null, "gpu": 2, "message": "f"}
    ]})");
  // On a shared GPU: its pod's processes, the PIDs seen in its cgroup (4: a
  // dead creator), and zombie groups; not a context another pod's dead
  // process left that its process happens to hold the device of (d names 11).
  StepReport s;
  read_trace(trace, ScenarioIdentity{"u-1", {11, 31, 5}, std::nullopt}, s);
  EXPECT_TRUE(s.pod_named);
  ASSERT_EQ(s.trace_findings.size(), 4U);
  EXPECT_EQ(s.trace_findings[0].message, "a");  // its pod's process
  EXPECT_EQ(s.trace_findings[1].message, "c");  // a zombie of its cgroup (zombies leave the pod)
  EXPECT_EQ(s.trace_findings[2].message, "e");  // its dead creator's context
  EXPECT_EQ(s.trace_findings[2].gpu, 0U);
  EXPECT_FALSE(s.trace_findings[2].related);
  EXPECT_EQ(s.trace_findings[3].message, "e1");  // grouped under it by trace: kept, marked
  EXPECT_TRUE(s.trace_findings[3].related);
  EXPECT_EQ(s.trace_findings[3].pid, 12);

  // With a device of its own, that device's dead listings and ghost memory are its own too.
  StepReport dev;
  read_trace(trace, ScenarioIdentity{"u-9", {}, 2U}, dev);
  ASSERT_EQ(dev.trace_findings.size(), 1U);
  EXPECT_EQ(dev.trace_findings[0].message, "f");
  EXPECT_FALSE(dev.pod_named);
  StepReport dev3;
  read_trace(trace, ScenarioIdentity{"u-9", {}, 3U}, dev3);
  ASSERT_EQ(dev3.trace_findings.size(), 1U);
  EXPECT_EQ(dev3.trace_findings[0].holders, std::vector<pid_t>{11});

  StepReport junk;
  read_trace(json::parse(R"({"processes": 3, "findings": [{"kind": 1}]})"), ScenarioIdentity{},
             junk);
  EXPECT_TRUE(junk.trace_findings.empty());
}

TEST(LabReading, FieldsOfTheWrongTypeAreAbsentNotThrown) {
  const json line =
      json::parse(R"({"mode": 3, "pid": "12", "big": 99999999999, "ok": 42, "neg": -1})");
  EXPECT_EQ(text_field(line, "mode"), "");
  EXPECT_EQ(text_field(line, "none"), "");
  EXPECT_FALSE(pid_field(line, "pid"));
  EXPECT_FALSE(pid_field(line, "big"));
  EXPECT_FALSE(pid_field(line, "neg"));
  EXPECT_EQ(pid_field(line, "ok"), 42);
  EXPECT_EQ(as_pid(json(7)), 7);
  EXPECT_FALSE(as_pid(json::array()));
}

TEST(LabReading, ObserveCountsAdoptedOrphansOnly) {
  const json observe = json::parse(R"({
    "pid1": {"pid": 1, "comm": "tini", "cmdline": ["tini", "--", "sleep", "infinity"], "is_init": true},
    "zombies": [{"pid": 7}],
    "orphans": [{"pid": 2, "adopted": false}, {"pid": 9, "adopted": true}],
    "orphaned_context": {"dead": 1},
    "findings": [{"kind": "orphan", "severity": "warning", "pid": 9, "message": "m"}]})");
  StepReport s;
  read_observe(observe, s);
  EXPECT_EQ(s.pid1, "tini -- sleep infinity");
  EXPECT_TRUE(s.pid1_is_init);
  EXPECT_EQ(s.zombies, std::vector<pid_t>{7});
  EXPECT_EQ(s.orphans, std::vector<pid_t>{9});
  EXPECT_EQ(s.listed_dead, 1U);
  ASSERT_EQ(s.observe_findings.size(), 1U);
}

Measurements ran(const std::string& inst, double release, double gibs) {
  Measurements m = held(release);
  m.scenario = inst.substr(0, 2);
  m.instance = inst;
  m.title = "t<&>";
  m.label = "l<&>";
  m.grace_s = 30;
  m.gpu_gib_seconds_during_termination = gibs;
  m.timeline = {{0, 2 * kGiBBytes}, {release, 0}};
  m.release_cause = "because";
  return m;
}

TEST(LabReport, ComparisonCarriesEveryRunsNumbers) {
  std::vector<Measurements> runs = {ran("S1", 30.04, 60.08), ran("S4", 0.11, 0.22)};
  Measurements s7;
  s7.instance = s7.scenario = "S7";
  s7.not_run = "needs ≥ 2 GPUs";
  runs.push_back(s7);
  const std::string md = comparison_markdown(runs);
  EXPECT_NE(md.find("| S1 | t<&> | 1 | 0 | 2.00 GiB | 30.04 s | 60.08 | 1.00 | because |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| S4 | t<&> | 1 | 0 | 2.00 GiB | 0.11 s | 0.22 | 0.00 | because |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("not run: needs ≥ 2 GPUs"), std::string::npos);
  EXPECT_NE(md.find("| | S1 | S4 | S7 |"), std::string::npos);
}

TEST(LabReport, SavingsOfTheFixesAgainstTheUnfixedScenarios) {
  const std::string md =
      comparison_markdown({ran("S1", 30, 60.5), ran("S2", 0.1, 0.25), ran("S3", 20, 40),
                           ran("S4", 0.1, 0.2), ran("S5", 2, 4)});
  EXPECT_NE(
      md.find("| held under | GiB·s | wasted vs S4 (0.20 GiB·s) | wasted vs S5 (4.00 GiB·s) |"),
      std::string::npos)
      << md;
  EXPECT_NE(md.find("| S1 | 60.50 | 60.30 | 56.50 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| S3 | 40.00 | 39.80 | 36.00 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| S2 | 0.25 | 0.05 | -3.75 |"), std::string::npos) << md;
}

TEST(LabReport, MeasuredAgainstThePlansExpectations) {
  auto s1 = ran("S1", 30.1, 60);
  s1.plan_expected_hold_s = 30;
  auto s2 = ran("S2", 0.15, 0.3);
  s2.plan_expected_hold_s = 30;
  auto s5 = ran("S5", 2, 4);  // ours: no expectation
  const std::string md = comparison_markdown({s1, s2, s5});
  EXPECT_NE(md.find("| S1 | 30.00 s (measured by the plan) | 30.10 s | as expected |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| S2 | 30.00 s | 0.15 s | **not as expected**: because |"), std::string::npos)
      << md;
  EXPECT_EQ(md.find("| S5 | "), md.rfind("| S5 | "));  // in the GiB·s table only
}

TEST(LabReport, TenWorkersAreComparedWithThePlans740) {
  auto w10 = ran("S1-w10", 30.0, 600.0);
  w10.workers = 10;
  w10.gpu_bytes_at_delete = 20 * kGiBBytes;
  const std::string md = comparison_markdown({ran("S1", 30, 60), w10});
  EXPECT_NE(md.find("S1-w10 against the plan's 740 GB·s"), std::string::npos) << md;
  EXPECT_NE(md.find("644.25 GB·s"), std::string::npos) << md;  // 600 GiB·s
  // 2 GiB per worker for 30 s of a 30 s grace against the plan's 2.47 GB.
  EXPECT_NE(md.find("2.15 GB per worker for 30.00 s of a 30.00 s grace, 0.87× the plan's"),
            std::string::npos)
      << md;
}

TEST(LabReport, TimelineHasOneEscapedSeriesPerRunScenario) {
  Measurements s7;
  s7.instance = s7.scenario = "S7";
  s7.not_run = "needs <2> & more";
  const std::string svg = timeline_svg({ran("S1", 30, 60), ran("S4", 0.1, 0.2), s7});
  const std::regex series(R"re(<path class="series" data-scenario="(S\d)")re");
  std::vector<std::string> ids;
  for (auto it = std::sregex_iterator(svg.begin(), svg.end(), series); it != std::sregex_iterator();
       ++it) {
    ids.push_back((*it)[1]);
  }
  EXPECT_EQ(ids, (std::vector<std::string>{"S1", "S4"}));
  EXPECT_EQ(svg.find("t<&>"), std::string::npos);
  EXPECT_NE(svg.find("l&lt;&amp;&gt;"), std::string::npos);
  EXPECT_NE(svg.find("needs &lt;2&gt; &amp; more"), std::string::npos);
  EXPECT_EQ(svg.rfind("</svg>\n"), svg.size() - 7);
}

TEST(LabReport, NotesSayWhatHappened) {
  auto m = ran("S1", 30.04, 60.08);
  m.deletion.kill_pid1_s = 30.0;
  m.deletion.pid1_exited_s = 30.01;
  m.deletion.pid1_status = 137;
  StepReport s;
  s.step = "after-kill";
  s.observe_exit = 1;
  s.pid1 = "sleep infinity";
  s.zombies = {3};
  s.trace_exit = 1;
  s.trace_findings = {{"zombie", "warning", 1234, std::nullopt, {}, "z"}};
  m.steps.push_back(s);
  const std::string md = notes_markdown(m);
  EXPECT_NE(md.find("SIGKILL to PID 1 at 30.00 s"), std::string::npos) << md;
  EXPECT_NE(md.find("1 zombie(s)"), std::string::npos);
  EXPECT_NE(md.find("zombie (warning) pid 1234"), std::string::npos);
  EXPECT_NE(md.find("how: because"), std::string::npos);
}

}  // namespace
