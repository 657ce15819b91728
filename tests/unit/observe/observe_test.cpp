// gpureap observe's classification on hand-built snapshots taken INSIDE a
// container: /proc is the container's, so every record's PID is local (NSpid has
// one entry). Each case states the situation it stands for.
#include "observe/observe.hpp"

#include <gtest/gtest.h>

#include <algorithm>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"
#include "snapshot_builder.hpp"

namespace {

using gpureap::findings::Severity;
using gpureap::node::NodeSnapshot;
using gpureap::node::ProcessRecord;
using gpureap::observe::DriverPidView;
using gpureap::observe::ListedStatus;
using gpureap::observe::ObserveFinding;
using gpureap::observe::ObserveReport;
namespace proc = gpureap::proc;
namespace gpu = gpureap::gpu;
namespace observe = gpureap::observe;
namespace findings = gpureap::findings;

using gpureap::test::kMiB;

// Seen from inside the namespace: one PID level, and its own /proc is readable.
proc::Process process(pid_t pid, pid_t ppid, const char* comm, char state = 'S') {
  auto p = gpureap::test::make_process(pid, ppid, comm, state);
  p.cmdline = {comm};
  p.fds_readable = true;
  return p;
}

proc::Process holder(pid_t pid, pid_t ppid, const char* comm, std::vector<std::string> nodes) {
  auto p = process(pid, ppid, comm);
  for (auto& n : nodes) p.gpu_fds.push_back({std::move(n), 1});
  p.gpu_fds.push_back({"nvidiactl", 1});
  return p;
}

class Builder : public gpureap::test::SnapshotBuilder {
 public:
  Builder() {
    snapshot().host_root = "/";
    snapshot().self_pid = 9999;
  }
};

ObserveReport analyse(const NodeSnapshot& snap) {
  return observe::analyse_observe(snap, findings::detect_all(snap));
}

std::vector<const ObserveFinding*> of_kind(const ObserveReport& rep, const std::string& kind) {
  std::vector<const ObserveFinding*> out;
  for (const auto& f : rep.findings) {
    if (f.kind == kind) out.push_back(&f);
  }
  return out;
}

TEST(KnownInit, ByCommOrArgv0Basename) {
  auto tini = process(1, 0, "tini");
  EXPECT_EQ(observe::known_init(tini), "tini");
  auto docker_init = process(1, 0, "python3");
  docker_init.cmdline = {"/sbin/docker-init", "--", "python3", "train.py"};
  EXPECT_EQ(observe::known_init(docker_init), "docker-init");
  auto ours = process(1, 0, "gpureap-init");
  ours.cmdline = {"/usr/local/bin/gpureap-init", "--", "sh"};
  EXPECT_EQ(observe::known_init(ours), "gpureap-init");
  EXPECT_FALSE(observe::known_init(process(1, 0, "bash")).has_value());
  auto python = process(1, 0, "python3");
  python.cmdline = {"python3", "/opt/init/train.py"};  // "init" in an argument is no init
  EXPECT_FALSE(observe::known_init(python).has_value());
}

// Driver 580 inside `unshare --pid` (FACTS.md): the worker is listed by its local PID.
TEST(AnalyseObserve, LocalPidsListedAreAlive) {
  Builder b;
  b.device(0, 2048 * kMiB);
  b.add(process(1, 0, "tini"));
  auto worker = holder(7, 1, "python3", {"nvidia0"});
  worker.pgrp = worker.session = 1;
  b.add(worker);
  b.list(0, 7, 2048 * kMiB);
  const auto snap = b.build();
  const auto rep = analyse(snap);
  ASSERT_TRUE(rep.pid1);
  EXPECT_EQ(rep.pid1->init, "tini");
  ASSERT_EQ(rep.listed.size(), 1U);
  EXPECT_EQ(rep.listed[0].status, ListedStatus::alive);
  EXPECT_EQ(snap.records[*rep.listed[0].record].process.pid, 7);
  EXPECT_EQ(rep.context.view, DriverPidView::local);
  EXPECT_EQ(rep.context.alive, 1U);
  EXPECT_EQ(rep.context.dead, 0U);
  EXPECT_TRUE(of_kind(rep, "orphaned_context").empty());
  EXPECT_TRUE(rep.context.unlisted_holders.empty());
  ASSERT_EQ(rep.orphans.size(), 1U);  // tini's own child: not adopted
  EXPECT_FALSE(rep.orphans[0].adopted);
  EXPECT_FALSE(rep.fails_check());
}

// Driver 590 + PyTorch under Kubernetes (the originating README): the pod's
// workers are listed by host PIDs that do not exist here. The plan's script
// called them orphaned; they are alive and merely not visible.
TEST(AnalyseObserve, HostPidsListedAreNotVisibleNeverOrphaned) {
  Builder b;
  b.device(0, 2048 * kMiB);
  b.device(1, 1024 * kMiB);
  b.add(holder(1, 0, "python3", {"nvidia0"}));
  auto rank1 = holder(42, 1, "python3", {"nvidia1"});
  rank1.pgrp = rank1.session = 1;
  b.add(rank1);
  b.list(0, 31337, 2048 * kMiB);
  b.list(1, 31400, 1024 * kMiB);
  const auto snap = b.build();
  // The pipeline's own detectors (node view) call these dead: observe must not.
  const auto found = findings::detect_all(snap);
  ASSERT_EQ(std::count_if(found.begin(), found.end(),
                          [](const findings::Finding& f) { return f.kind == findings::Kind::orphaned_context; }),
            2);
  const auto rep = observe::analyse_observe(snap, found);
  ASSERT_EQ(rep.listed.size(), 2U);
  for (const auto& e : rep.listed) {
    EXPECT_EQ(e.status, ListedStatus::not_visible) << e.reason;
    EXPECT_NE(e.reason.find("host PID"), std::string::npos) << e.reason;
  }
  EXPECT_EQ(rep.context.view, DriverPidView::host);
  EXPECT_EQ(rep.context.dead, 0U);
  EXPECT_EQ(rep.context.not_visible, 2U);
  EXPECT_EQ(rep.context.unlisted_holders, (std::vector<pid_t>{1, 42}));
  EXPECT_TRUE(of_kind(rep, "orphaned_context").empty());
  auto host = of_kind(rep, "driver_host_pids");
  ASSERT_EQ(host.size(), 1U);
  EXPECT_NE(host[0]->message.find("driver reports PIDs outside this PID namespace (host PIDs): 2 "
                                  "listed, 2 local holders unlisted"),
            std::string::npos)
      << host[0]->message;
  EXPECT_NE(host[0]->message.find("gpureap trace"), std::string::npos);
  for (const auto* f : of_kind(rep, "hidden_holder")) EXPECT_EQ(f->severity, Severity::info) << f->message;
  // PID 1 is python3, not an init, but nothing needs reaping: said, not failed.
  auto pid1 = of_kind(rep, "pid1_not_init");
  ASSERT_EQ(pid1.size(), 1U);
  EXPECT_EQ(pid1[0]->severity, Severity::info);
  EXPECT_FALSE(rep.fails_check());
  const auto text = observe::render_observe(snap, rep);
  EXPECT_EQ(text.find("ORPHANED"), std::string::npos) << text;
  EXPECT_NE(text.find("not_visible"), std::string::npos) << text;
}

// The driver may list a thread id; it resolves through its Tgid.
TEST(AnalyseObserve, ThreadIdIsAThreadOfALocalProcess) {
  Builder b;
  b.device(0, 512 * kMiB);
  b.add(process(1, 0, "dumb-init"));
  b.add(holder(7, 1, "python3", {"nvidia0"}));
  b.list(0, 8, 512 * kMiB);
  const auto snap = b.build([](pid_t pid) -> std::optional<proc::Process> {
    if (pid != 8) return std::nullopt;
    auto t = process(8, 1, "python3");
    t.tgid = 7;
    return t;
  });
  const auto rep = analyse(snap);
  ASSERT_EQ(rep.listed.size(), 1U);
  EXPECT_EQ(rep.listed[0].status, ListedStatus::thread);
  EXPECT_EQ(snap.records[*rep.listed[0].record].process.pid, 7);
  EXPECT_EQ(rep.context.thread, 1U);
  EXPECT_TRUE(of_kind(rep, "orphaned_context").empty());
  EXPECT_FALSE(rep.fails_check());
}

// A listed PID nobody here explains: no local process holds that GPU at all.
TEST(AnalyseObserve, DeadListingWithNoLocalHolderIsAnOrphanedContext) {
  Builder b;
  b.device(0, 1024 * kMiB);
  b.add(process(1, 0, "tini"));
  b.add(process(5, 1, "sleep"));
  b.list(0, 999, 1024 * kMiB);
  const auto snap = b.build();
  const auto rep = analyse(snap);
  ASSERT_EQ(rep.listed.size(), 1U);
  EXPECT_EQ(rep.listed[0].status, ListedStatus::dead);
  EXPECT_EQ(rep.context.dead, 1U);
  EXPECT_EQ(rep.context.view, DriverPidView::unknown);
  auto ctx = of_kind(rep, "orphaned_context");
  ASSERT_EQ(ctx.size(), 1U);
  EXPECT_EQ(ctx[0]->severity, Severity::critical);
  EXPECT_EQ(ctx[0]->pid, 999);
  EXPECT_NE(ctx[0]->message.find("judged from inside the container"), std::string::npos);
  EXPECT_TRUE(rep.fails_check());
  EXPECT_NE(observe::render_observe(snap, rep).find("ORPHANED GPU CONTEXT"), std::string::npos);
}

// Fork after CUDA init inside the namespace, creator killed: the driver (which
// lists PID 1 by its local PID, so it speaks this namespace's numbers) keeps
// listing the dead creator; its child holds the context unlisted.
TEST(AnalyseObserve, ForkInheritedContextWithLocalEvidenceIsDeadAndNamesTheChild) {
  Builder b;
  b.device(0, 3072 * kMiB);
  b.add(holder(1, 0, "gpureap-worker", {"nvidia0"}));
  auto child = holder(9, 1, "gpureap-worker", {"nvidia0"});
  child.pgrp = child.session = 0;  // leaders outside the namespace
  b.add(child);
  b.list(0, 1, 2048 * kMiB);
  b.list(0, 5, 1024 * kMiB);  // the dead creator
  const auto snap = b.build();
  const auto rep = analyse(snap);
  ASSERT_EQ(rep.listed.size(), 2U);
  EXPECT_EQ(rep.listed[0].status, ListedStatus::alive);
  EXPECT_EQ(rep.listed[1].status, ListedStatus::dead) << rep.listed[1].reason;
  EXPECT_EQ(rep.context.view, DriverPidView::local);
  auto ctx = of_kind(rep, "orphaned_context");
  ASSERT_EQ(ctx.size(), 1U);
  EXPECT_EQ(ctx[0]->pid, 5);
  ASSERT_FALSE(ctx[0]->holders.empty());
  EXPECT_EQ(ctx[0]->holders[0].pid, 9);
  EXPECT_EQ(rep.context.unlisted_holders, (std::vector<pid_t>{9}));
  ASSERT_EQ(rep.orphans.size(), 1U);
  EXPECT_TRUE(rep.orphans[0].adopted);
  EXPECT_EQ(of_kind(rep, "orphan").size(), 1U);
  EXPECT_TRUE(rep.fails_check());
}

// Without any local-PID listing, a holder whose process group was led by the
// listed PID still marks it as a dead local creator.
TEST(AnalyseObserve, HolderLedByTheListedPidMakesItDead) {
  Builder b;
  b.device(0, 1024 * kMiB);
  b.add(process(1, 0, "tini"));
  auto child = holder(9, 1, "python3", {"nvidia0"});
  child.pgrp = 5;
  child.session = 1;
  b.add(child);
  b.list(0, 5, 1024 * kMiB);
  const auto rep = analyse(b.build());
  ASSERT_EQ(rep.listed.size(), 1U);
  EXPECT_EQ(rep.listed[0].status, ListedStatus::dead);
  EXPECT_NE(rep.listed[0].reason.find("process-group"), std::string::npos) << rep.listed[0].reason;
  EXPECT_EQ(of_kind(rep, "orphaned_context").size(), 1U);
}

// A host PID that happens to equal a local PID which holds no GPU descriptor is
// not taken for that process.
TEST(AnalyseObserve, CoincidentalLocalPidWithoutDescriptorsIsNotVisible) {
  Builder b;
  b.device(0, 1024 * kMiB);
  b.add(process(1, 0, "tini"));
  b.add(process(3, 1, "sh"));
  b.add(holder(7, 1, "python3", {"nvidia0"}));
  b.list(0, 3, 1024 * kMiB);
  const auto rep = analyse(b.build());
  ASSERT_EQ(rep.listed.size(), 1U);
  EXPECT_EQ(rep.listed[0].status, ListedStatus::not_visible) << rep.listed[0].reason;
  EXPECT_EQ(rep.context.view, DriverPidView::host);
}

// The plan's scenario 1: bash as PID 1, a zombie it never reaps, an orphan.
TEST(AnalyseObserve, BashAsPid1WithAZombieAndAnOrphan) {
  Builder b;
  b.add(process(1, 0, "bash"));
  b.add(process(12, 1, "python3", 'Z'));
  auto orphan = process(13, 1, "python3");
  orphan.pgrp = 11;  // its group leader (the exited parent.py) is gone
  orphan.session = 1;
  b.add(orphan);
  auto job = process(14, 1, "sleep");
  job.pgrp = job.session = 1;  // bash's own background job: not adopted
  b.add(job);
  const auto snap = b.build();
  const auto rep = analyse(snap);
  ASSERT_TRUE(rep.pid1);
  EXPECT_FALSE(rep.pid1->init);
  ASSERT_EQ(rep.zombies.size(), 1U);
  EXPECT_EQ(snap.records[rep.zombies[0]].process.pid, 12);
  ASSERT_EQ(rep.orphans.size(), 2U);
  EXPECT_TRUE(rep.orphans[0].adopted);
  EXPECT_FALSE(rep.orphans[1].adopted);
  auto pid1 = of_kind(rep, "pid1_not_init");
  ASSERT_EQ(pid1.size(), 1U);
  EXPECT_EQ(pid1[0]->severity, Severity::warning);
  EXPECT_NE(pid1[0]->message.find("PID 1 is bash, not an init: zombies will not be reaped"),
            std::string::npos);
  EXPECT_EQ(of_kind(rep, "zombie").size(), 1U);
  auto orphans = of_kind(rep, "orphan");
  ASSERT_EQ(orphans.size(), 1U);
  EXPECT_EQ(orphans[0]->pid, 13);
  EXPECT_TRUE(rep.fails_check());
  EXPECT_EQ(rep.context.view, DriverPidView::none);
}

// NVML since 535.113 omits processes it cannot see from the caller's namespace:
// memory used, local holders, nothing listed.
TEST(AnalyseObserve, DriverListingFewerThanLocalHoldersMayHide) {
  Builder b;
  b.device(0, 4096 * kMiB);
  b.add(process(1, 0, "catatonit"));
  b.add(holder(7, 1, "python3", {"nvidia0"}));
  b.add(holder(8, 1, "python3", {"nvidia0"}));
  const auto rep = analyse(b.build());
  ASSERT_EQ(rep.devices.size(), 1U);
  EXPECT_TRUE(rep.devices[0].may_hide);
  EXPECT_EQ(rep.devices[0].local_holders, 2U);
  EXPECT_TRUE(rep.context.may_hide);
  EXPECT_EQ(of_kind(rep, "driver_may_hide").size(), 1U);
  auto ghost = of_kind(rep, "ghost_memory");
  ASSERT_EQ(ghost.size(), 1U);
  EXPECT_EQ(ghost[0]->severity, Severity::info);
  for (const auto* f : of_kind(rep, "hidden_holder")) EXPECT_EQ(f->severity, Severity::info);
  EXPECT_FALSE(rep.fails_check());
}

TEST(ObserveJson, SchemaAndSections) {
  Builder b;
  b.device(0, 2048 * kMiB);
  b.add(process(1, 0, "bash"));
  b.add(holder(7, 1, "python3", {"nvidia0"}));
  b.add(process(8, 1, "python3", 'Z'));
  b.list(0, 31337, 2048 * kMiB);
  const auto snap = b.build();
  const auto doc = observe::observe_json(snap, analyse(snap));
  EXPECT_EQ(doc["schema"], 1);
  EXPECT_EQ(doc["pid1"]["pid"], 1);
  EXPECT_EQ(doc["pid1"]["is_init"], false);
  EXPECT_TRUE(doc["pid1"]["init"].is_null());
  EXPECT_EQ(doc["processes"].size(), 3U);
  ASSERT_EQ(doc["zombies"].size(), 1U);
  EXPECT_EQ(doc["zombies"][0]["pid"], 8);
  ASSERT_EQ(doc["listed"].size(), 1U);
  EXPECT_EQ(doc["listed"][0]["pid"], 31337);
  EXPECT_EQ(doc["listed"][0]["used_memory"], 2048 * kMiB);
  EXPECT_EQ(doc["listed"][0]["status"], "not_visible");
  ASSERT_EQ(doc["holders"].size(), 1U);
  EXPECT_EQ(doc["holders"][0]["pid"], 7);
  EXPECT_EQ(doc["orphaned_context"]["not_visible"], 1);
  EXPECT_EQ(doc["orphaned_context"]["driver_pid_view"], "host");
  EXPECT_EQ(doc["gpu"]["devices"][0]["local_holders"], 1);
  EXPECT_TRUE(doc["findings"].is_array());
  EXPECT_EQ(doc["result"], "findings");  // the zombie under a non-init PID 1
}

}  // namespace
