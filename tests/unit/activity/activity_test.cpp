// Utilization over time: the sampling window (absence is idle, gaps and
// unsupported devices break continuity, memory min/max, forgetting gone
// processes) and the detectors that judge it (idle_holder, nccl_spin), on
// hand-built readings and snapshots.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <vector>

#include "findings/finding.hpp"
#include "gpu/activity.hpp"
#include "report/report.hpp"
#include "snapshot_builder.hpp"

namespace {

using namespace std::chrono_literals;
using gpureap::findings::Finding;
using gpureap::findings::Kind;
using gpureap::findings::Severity;
using gpureap::gpu::ActivitySampler;
using gpureap::gpu::DeviceUtilization;
using gpureap::gpu::GpuSnapshot;
using gpureap::gpu::UtilizationSample;
using gpureap::test::kGiB;
using gpureap::test::kMiB;
using Clock = ActivitySampler::Clock;
using Reading = gpureap::sys::Result<std::vector<DeviceUtilization>>;

const Clock::time_point t0 = Clock::time_point(std::chrono::seconds(1'800'000'000));

std::uint64_t us(Clock::time_point t) {
  return static_cast<std::uint64_t>(std::chrono::duration_cast<std::chrono::microseconds>(t.time_since_epoch()).count());
}

Reading reading(std::vector<UtilizationSample> samples, bool supported = true) {
  DeviceUtilization d;
  d.index = 0;
  d.supported = supported;
  if (!supported) d.unsupported_reason = "MIG";
  d.samples = std::move(samples);
  return std::vector<DeviceUtilization>{d};
}

GpuSnapshot listing(std::vector<std::pair<std::uint32_t, std::uint64_t>> procs) {
  GpuSnapshot g;
  gpureap::gpu::GpuDevice d;
  d.index = 0;
  for (auto [pid, bytes] : procs) d.processes.push_back({pid, bytes});
  g.devices.push_back(d);
  return g;
}

// A process absent from every reading is idle for as long as it has been listed.
TEST(ActivitySampler, AbsentFromReadingsIsIdleSinceFirstListed) {
  ActivitySampler s(600s, 1s);
  s.add_listing(listing({{100, kGiB}, {200, kGiB}}), t0);
  for (int i = 0; i <= 120; ++i) {
    const auto now = t0 + std::chrono::seconds(i);
    s.add_utilization(reading({{200, us(now), 97, 5}}), now);
  }
  const auto now = t0 + 120s;
  s.add_listing(listing({{100, kGiB}, {200, kGiB}}), now);
  const auto a = s.summarize(now);
  const auto* idle = a.find(0, 100);
  const auto* busy = a.find(0, 200);
  ASSERT_NE(idle, nullptr);
  ASSERT_NE(busy, nullptr);
  EXPECT_DOUBLE_EQ(idle->idle_s, 120);
  EXPECT_DOUBLE_EQ(idle->observed_s, 120);
  ASSERT_TRUE(idle->sm_mean.has_value());
  EXPECT_DOUBLE_EQ(*idle->sm_mean, 0);
  EXPECT_EQ(idle->readings, 121U);
  EXPECT_DOUBLE_EQ(busy->idle_s, 0);
  EXPECT_DOUBLE_EQ(*busy->sm_mean, 97);
  EXPECT_EQ(busy->sm_max, 97U);
  EXPECT_EQ(busy->memory_min, kGiB);
  EXPECT_EQ(busy->memory_max, kGiB);
}

TEST(ActivitySampler, ABusyReadingRestartsTheIdleClock) {
  ActivitySampler s(600s, 1s);
  s.add_listing(listing({{100, kGiB}}), t0);
  for (int i = 0; i <= 60; ++i) {
    const auto now = t0 + std::chrono::seconds(i);
    std::vector<UtilizationSample> samples;
    if (i == 40) samples.push_back({100, us(now), 30, 1});
    s.add_utilization(reading(samples), now);
  }
  const auto a = s.summarize(t0 + 60s);
  EXPECT_DOUBLE_EQ(a.find(0, 100)->idle_s, 20);
  EXPECT_NEAR(*a.find(0, 100)->sm_mean, 30.0 / 61, 1e-9);
}

TEST(ActivitySampler, AFailedReadingOrAGapStartsCoverageAgain) {
  ActivitySampler s(600s, 1s);
  s.add_listing(listing({{100, kGiB}}), t0);
  for (int i = 0; i <= 30; ++i) s.add_utilization(reading({}), t0 + std::chrono::seconds(i));
  s.add_utilization(gpureap::sys::Error{0, "NVML: hung"}, t0 + 31s);
  EXPECT_EQ(s.summarize(t0 + 31s).error, "NVML: hung");
  for (int i = 32; i <= 40; ++i) s.add_utilization(reading({}), t0 + std::chrono::seconds(i));
  EXPECT_DOUBLE_EQ(s.summarize(t0 + 40s).find(0, 100)->idle_s, 8);  // since the reading at 32 s
  // Ten periods without a reading: nothing is known about them.
  s.add_utilization(reading({}), t0 + 50s);
  EXPECT_DOUBLE_EQ(s.summarize(t0 + 55s).find(0, 100)->idle_s, 5);
}

TEST(ActivitySampler, OnAnUnsupportedDeviceNothingIsIdle) {
  ActivitySampler s(600s, 1s);
  s.add_listing(listing({{100, kGiB}}), t0);
  for (int i = 0; i <= 30; ++i) s.add_utilization(reading({}, false), t0 + std::chrono::seconds(i));
  const auto a = s.summarize(t0 + 30s);
  ASSERT_NE(a.device(0), nullptr);
  EXPECT_FALSE(a.device(0)->supported);
  EXPECT_DOUBLE_EQ(a.find(0, 100)->idle_s, 0);
  EXPECT_FALSE(a.find(0, 100)->sm_mean.has_value());
}

TEST(ActivitySampler, ForgetsWhatLeftTheListAndKeepsOnlyTheWindow) {
  ActivitySampler s(10s, 1s);
  for (int i = 0; i < 1000; ++i) {
    const auto now = t0 + std::chrono::seconds(i);
    const auto pid = static_cast<std::uint32_t>(1000 + i % 50);  // churn
    s.add_listing(listing({{pid, kGiB + static_cast<std::uint64_t>(i)}}), now);
    s.add_utilization(reading({{pid, us(now), 50, 1}}), now);
  }
  // One process, ten seconds of readings and samples: bounded whatever ran before.
  EXPECT_LE(s.size(), 40U);
  const auto a = s.summarize(t0 + 999s);
  ASSERT_EQ(a.processes.size(), 1U);
  EXPECT_EQ(a.processes[0].pid, 1000U + 999 % 50);
}

TEST(ActivitySampler, MemoryMinAndMaxOverTheWindow) {
  ActivitySampler s(60s, 1s);
  s.add_listing(listing({{100, 2 * kGiB}}), t0);
  s.add_listing(listing({{100, 3 * kGiB}}), t0 + 10s);
  s.add_listing(listing({{100, 2 * kGiB + kMiB}}), t0 + 20s);
  const auto a = s.summarize(t0 + 20s);
  EXPECT_EQ(a.find(0, 100)->memory_min, 2 * kGiB);
  EXPECT_EQ(a.find(0, 100)->memory_max, 3 * kGiB);
}

// ---- the detectors over a snapshot carrying the window.

gpureap::gpu::Activity activity(std::vector<gpureap::gpu::ProcessActivity> procs, bool supported = true) {
  gpureap::gpu::Activity a;
  a.window_s = 900;
  a.period_s = 2;
  a.devices.push_back({0, supported, supported ? "" : "MIG"});
  a.processes = std::move(procs);
  return a;
}

gpureap::node::NodeSnapshot idle_node(double idle_s, std::uint64_t bytes, bool supported = true) {
  gpureap::test::SnapshotBuilder b;
  b.device(0, bytes);
  auto p = gpureap::test::make_process(100, 1, "python3");
  p.gpu_fds = {{"nvidia0", 2}, {"nvidiactl", 1}};
  b.add(std::move(p), gpureap::test::pod_container("c1", "notebook-0", "u1", "ml"));
  b.list(0, 100, bytes);
  auto snap = b.build();
  gpureap::gpu::ProcessActivity pa;
  pa.device = 0;
  pa.pid = 100;
  pa.idle_s = idle_s;
  pa.observed_s = idle_s;
  pa.sm_mean = 0;
  snap.activity = activity({pa}, supported);
  return snap;
}

TEST(IdleHolder, HoldingMemoryAtZeroSmPastTheThresholdIsAWarning) {
  gpureap::findings::DetectOptions opt;
  opt.idle_seconds = 600;
  opt.idle_min_bytes = 512 * kMiB;
  auto found = gpureap::findings::detect_idle_holders(idle_node(601, 2 * kGiB), opt);
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].kind, Kind::idle_holder);
  EXPECT_EQ(found[0].severity, Severity::warning);
  EXPECT_EQ(found[0].pid, 100);
  EXPECT_EQ(found[0].bytes, 2 * kGiB);
  EXPECT_NE(found[0].message.find("pod ml/notebook-0"), std::string::npos) << found[0].message;
  EXPECT_NE(found[0].message.find("10.0 min"), std::string::npos) << found[0].message;
  // In detect_all too, and it fails the check.
  auto all = gpureap::findings::detect_all(idle_node(601, 2 * kGiB), opt);
  EXPECT_TRUE(gpureap::findings::fails_check(all));
}

TEST(IdleHolder, NotBelowEitherThresholdNorWhereAbsenceSaysNothing) {
  gpureap::findings::DetectOptions opt;
  opt.idle_seconds = 600;
  opt.idle_min_bytes = 512 * kMiB;
  EXPECT_TRUE(gpureap::findings::detect_idle_holders(idle_node(599, 2 * kGiB), opt).empty());
  EXPECT_TRUE(gpureap::findings::detect_idle_holders(idle_node(900, 256 * kMiB), opt).empty());
  EXPECT_TRUE(gpureap::findings::detect_idle_holders(idle_node(900, 2 * kGiB, false), opt).empty());
  auto unsampled = idle_node(900, 2 * kGiB);
  unsampled.activity.reset();
  EXPECT_TRUE(gpureap::findings::detect_idle_holders(unsampled, opt).empty());
}

// Ranks 1 and 2 of a three-rank job survive rank 0, spinning.
gpureap::node::NodeSnapshot spinning_job(double sm, std::uint64_t drift, double seen_s) {
  gpureap::test::SnapshotBuilder b;
  for (unsigned i = 0; i < 3; ++i) b.device(i, 0);
  // The launcher (torchrun) the ranks belong to: they are not orphans.
  auto launcher = gpureap::test::make_process(200, 1, "torchrun");
  launcher.nspid = {200, 1};  // the container's PID 1
  b.add(std::move(launcher), gpureap::test::pod_container("c2", "trainer-0", "u2", "ml"));
  for (int r = 1; r <= 2; ++r) {
    auto p = gpureap::test::make_process(200 + r, 200, "python3");
    p.pgrp = p.session = 200;  // started by the launcher
    p.env = {{"RANK", std::to_string(r)},        {"LOCAL_RANK", std::to_string(r)},
             {"WORLD_SIZE", "3"},                {"LOCAL_WORLD_SIZE", "3"},
             {"MASTER_ADDR", "127.0.0.1"},       {"MASTER_PORT", "29500"},
             {"TORCHELASTIC_RUN_ID", "job-spin"}};
    p.gpu_fds = {{"nvidia" + std::to_string(r), 2}};
    b.add(std::move(p), gpureap::test::pod_container("c2", "trainer-0", "u2", "ml"));
    b.list(static_cast<unsigned>(r), static_cast<std::uint32_t>(200 + r), 2900 * kMiB);
  }
  auto snap = b.build();
  gpureap::gpu::Activity a;
  a.period_s = 2;
  for (unsigned r = 1; r <= 2; ++r) {
    a.devices.push_back({r, true, ""});
    gpureap::gpu::ProcessActivity pa;
    pa.device = r;
    pa.pid = 200 + r;
    pa.observed_s = seen_s;
    pa.sm_mean = sm;
    pa.sm_max = 100;
    pa.memory_min = 2900 * kMiB;
    pa.memory_max = 2900 * kMiB + drift;
    a.processes.push_back(pa);
  }
  snap.activity = a;
  return snap;
}

TEST(NcclSpin, SurvivorsSpinningWithFlatMemoryAreOneCriticalRootCause) {
  gpureap::findings::DetectOptions opt;
  auto all = gpureap::findings::detect_all(spinning_job(98, 0, 120), opt);
  ASSERT_EQ(all.size(), 1U);
  const Finding& f = all[0];
  EXPECT_EQ(f.kind, Kind::nccl_spin);
  EXPECT_EQ(f.severity, Severity::critical);
  EXPECT_EQ(f.bytes, 5800 * kMiB);
  ASSERT_NE(f.group, nullptr);
  EXPECT_EQ(f.group->missing_local_ranks, std::vector<int>{0});
  ASSERT_EQ(f.related.size(), 1U);  // the missing-rank finding is the same root cause
  EXPECT_EQ(f.related[0].kind, Kind::nccl_missing_rank);
  EXPECT_NE(f.message.find("98 % SM"), std::string::npos) << f.message;
}

TEST(NcclSpin, NotWhenIdleMovingOrSeenTooBriefly) {
  gpureap::findings::DetectOptions opt;
  auto kinds = [&](const gpureap::node::NodeSnapshot& snap) {
    std::vector<Kind> out;
    for (const auto& f : gpureap::findings::detect_all(snap, opt)) out.push_back(f.kind);
    return out;
  };
  EXPECT_EQ(kinds(spinning_job(40, 0, 120)), std::vector<Kind>{Kind::nccl_missing_rank});
  EXPECT_EQ(kinds(spinning_job(98, 512 * kMiB, 120)), std::vector<Kind>{Kind::nccl_missing_rank});
  EXPECT_EQ(kinds(spinning_job(98, 0, 30)), std::vector<Kind>{Kind::nccl_missing_rank});
}

// ---- gpureap check's line.

TEST(CheckLine, NamesTheWorstRootCauseInAtMost80Bytes) {
  gpureap::findings::DetectOptions opt;
  auto snap = spinning_job(98, 0, 120);
  auto zombie = gpureap::test::make_process(300, 201, "defunct", 'Z');
  snap.records.push_back({});
  snap.records.back().process = zombie;
  const auto found = gpureap::findings::detect_all(snap, opt);
  const std::string line = gpureap::report::render_check_line(snap, found);
  EXPECT_LE(line.size(), 80U) << line;
  EXPECT_EQ(line.rfind("nccl_spin: ", 0), 0U) << line;
  EXPECT_NE(line.find("+1 more"), std::string::npos) << line;
  EXPECT_EQ(line.find('\n'), std::string::npos);
}

TEST(CheckLine, CutsAtAUtf8BoundaryAndKeepsOneLine) {
  const std::string long_line = std::string(78, 'a') + "\xC3\xA9\xC3\xA9" + "\nsecond";
  const std::string cut = gpureap::report::fit_line(long_line);
  EXPECT_EQ(cut.size(), 80U);
  EXPECT_EQ(cut.substr(78), "\xC3\xA9");
  EXPECT_EQ(gpureap::report::fit_line(std::string(79, 'a') + "\xC3\xA9").size(), 79U);
  EXPECT_EQ(gpureap::report::fit_line("a\nb"), "a b");
}

TEST(CheckLine, OkWhenNothingAboveInfo) {
  gpureap::test::SnapshotBuilder b;
  b.device(0, 0);
  auto snap = b.build();
  EXPECT_EQ(gpureap::report::render_check_line(snap, {}), "OK: no GPU hygiene problem (0 GPU processes)");
}

}  // namespace
