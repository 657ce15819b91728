// Detectors, the PID matcher and the renderers on hand-built snapshots: each
// case states the node situation it stands for.
#include <gtest/gtest.h>

#include <algorithm>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"
#include "report/report.hpp"
#include "snapshot_builder.hpp"

namespace {

using gpureap::findings::Kind;
using gpureap::findings::Severity;
using gpureap::node::NodeSnapshot;
using gpureap::node::PidMatch;
using gpureap::node::ProcessRecord;
namespace container = gpureap::container;
namespace proc = gpureap::proc;
namespace gpu = gpureap::gpu;

using gpureap::test::kGiB;
using gpureap::test::kMiB;
using Builder = gpureap::test::SnapshotBuilder;

proc::Process process(pid_t pid, pid_t ppid, const char* comm, char state = 'S') {
  return gpureap::test::make_process(pid, ppid, comm, state);
}

container::ContainerInfo in_pod(const std::string& id, const std::string& pod) {
  return gpureap::test::pod_container(id, pod);
}

TEST(MatchListings, HostPidThreadNamespaceAndDead) {
  Builder b;
  b.device(0, 0, 0);
  auto holder = process(100, 1, "python3");
  holder.gpu_fds = {{"nvidia0", 3}};
  b.add(holder);
  auto in_ns = process(200, 1, "worker");
  in_ns.nspid = {200, 7};
  in_ns.gpu_fds = {{"nvidia0", 2}};
  b.add(in_ns);
  b.list(0, 100, 1 * kMiB);    // host pid
  b.list(0, 7, 2 * kMiB);      // container-local pid of 200
  b.list(0, 150, 3 * kMiB);    // a thread of 100
  b.list(0, 999, 4 * kMiB);    // nobody
  auto snap = b.build([](pid_t pid) -> std::optional<proc::Process> {
    if (pid != 150) return std::nullopt;
    auto t = process(150, 1, "python3");
    t.tgid = 100;
    return t;
  });
  ASSERT_EQ(snap.listings.size(), 4U);
  EXPECT_EQ(snap.listings[0].match, PidMatch::host);
  EXPECT_EQ(snap.listings[1].match, PidMatch::namespace_);
  EXPECT_EQ(snap.records[*snap.listings[1].record].process.pid, 200);
  EXPECT_EQ(snap.listings[2].match, PidMatch::thread);
  EXPECT_EQ(snap.records[*snap.listings[2].record].process.pid, 100);
  EXPECT_EQ(snap.listings[3].match, PidMatch::dead);
  EXPECT_EQ(snap.gpu_memory(*snap.find(100)), 4 * kMiB);  // own listing + its thread's
}

TEST(MatchListings, HostPidWithoutDescriptorsLosesToTheNamespacePidThatHoldsTheGpu) {
  Builder b;
  b.device(0, 0, 0);
  b.add(process(7, 1, "kworker"));  // host pid 7: holds nothing
  auto in_ns = process(300, 1, "worker");
  in_ns.nspid = {300, 7};
  in_ns.gpu_fds = {{"nvidia0", 1}};
  b.add(in_ns);
  b.list(0, 7, kMiB);
  auto snap = b.build();
  EXPECT_EQ(snap.listings[0].match, PidMatch::namespace_);
  EXPECT_EQ(snap.records[*snap.listings[0].record].process.pid, 300);
}

// Found by the lab: two pods whose workers share local PID 13, one on each GPU.
// The dead creator of GPU 5's context (local PID 13) must not be pinned on the
// other pod's live worker, which holds GPU 2 only.
TEST(MatchListings, ANamespacePidMatchesOnlyAHolderOfThatGpu) {
  Builder b;
  b.device(2, 0, 0);
  b.device(5, 0, 0);
  auto other_pod = process(18773, 1, "worker");
  other_pod.nspid = {18773, 13};
  other_pod.fds_readable = true;
  other_pod.gpu_fds = {{"nvidia2", 1}, {"nvidiactl", 1}};
  b.add(other_pod);
  auto child = process(18726, 1, "worker");  // inherited the dead creator's context
  child.nspid = {18726, 14};
  child.fds_readable = true;
  child.gpu_fds = {{"nvidia5", 1}, {"nvidiactl", 1}};
  b.add(child);
  b.list(2, 13, kMiB);  // the other pod's worker, by its local PID
  b.list(5, 13, kMiB);  // the dead creator, by its local PID
  auto snap = b.build();
  EXPECT_EQ(snap.listings[0].match, PidMatch::namespace_);
  EXPECT_EQ(snap.records[*snap.listings[0].record].process.pid, 18773);
  EXPECT_EQ(snap.listings[1].match, PidMatch::dead);
  EXPECT_EQ(snap.gpu_memory(*snap.find(18773)), kMiB);  // not 2 MiB

  // A host PID holding another GPU's node only is no owner of this GPU's context.
  Builder h;
  h.device(0, 0, 0);
  h.device(1, 0, 0);
  auto on_one = process(400, 1, "python3");
  on_one.fds_readable = true;
  on_one.gpu_fds = {{"nvidia1", 2}};
  h.add(on_one);
  h.list(0, 400, kMiB);
  h.list(1, 400, kMiB);
  auto snap2 = h.build();
  EXPECT_EQ(snap2.listings[0].match, PidMatch::stale);
  EXPECT_EQ(snap2.listings[1].match, PidMatch::host);
}

TEST(MatchListings, ALiveHostPidHoldingNoGpuDescriptorIsStaleAndNotAttributed) {
  Builder b;
  b.device(0, 0, 0);
  auto reused = process(400, 1, "bash");  // the driver's pid 400, reused by a shell
  reused.fds_readable = true;
  b.add(reused);
  auto unknown = process(500, 1, "secret");  // its descriptors could not be read
  b.add(unknown);
  auto zombie = process(600, 1, "python3", 'Z');  // the creator, exited, not reaped
  zombie.fds_readable = true;
  b.add(zombie);
  auto owner = process(700, 1, "trainer");
  owner.fds_readable = true;
  owner.gpu_fds = {{"nvidia0", 2}};
  b.add(owner);
  b.list(0, 400, kMiB);
  b.list(0, 500, kMiB);
  b.list(0, 600, kMiB);
  b.list(0, 700, kMiB);
  auto snap = b.build();
  EXPECT_EQ(snap.listings[0].match, PidMatch::stale);
  EXPECT_EQ(snap.records[*snap.listings[0].record].process.pid, 400);  // who has the pid now
  EXPECT_FALSE(snap.find(400)->listed());
  EXPECT_EQ(snap.gpu_memory(*snap.find(400)), std::nullopt);
  EXPECT_EQ(snap.listings[1].match, PidMatch::host);  // unknown: not called stale
  EXPECT_TRUE(snap.find(500)->listed());
  EXPECT_EQ(snap.listings[2].match, PidMatch::stale);
  EXPECT_EQ(snap.listings[3].match, PidMatch::host);
  EXPECT_TRUE(gpureap::node::names_gone_process(PidMatch::stale));
  EXPECT_FALSE(gpureap::node::names_gone_process(PidMatch::host));
}

TEST(MatchListings, WithoutAnyDeviceNodeHoldingNoDescriptorProvesNothing) {
  // A snapshot replayed (--gpu json:FILE) on a machine with no NVIDIA node.
  Builder b;
  b.snapshot().gpu_descriptors_visible = false;
  b.device(0, 0, 0);
  auto p = process(400, 1, "python3");
  p.fds_readable = true;
  b.add(p);
  b.list(0, 400, kMiB);
  auto snap = b.build();
  EXPECT_EQ(snap.listings[0].match, PidMatch::host);
  EXPECT_EQ(snap.gpu_memory(*snap.find(400)), kMiB);
}

TEST(MatchListings, ProcessStartedAfterTheScanIsInsertedInPidOrder) {
  Builder b;
  b.device(0, 0, 0);
  b.add(process(10, 1, "a"));
  b.add(process(30, 1, "c"));
  b.list(0, 30, kMiB);
  b.list(0, 20, kMiB);
  auto snap = b.build([](pid_t pid) -> std::optional<proc::Process> {
    if (pid == 20) return process(20, 1, "late");
    return std::nullopt;
  });
  ASSERT_EQ(snap.records.size(), 3U);
  EXPECT_EQ(snap.records[1].process.pid, 20);
  EXPECT_EQ(snap.records[*snap.listings[0].record].process.pid, 30);
  EXPECT_EQ(snap.records[*snap.listings[1].record].process.pid, 20);
}

TEST(DetectZombies, NamesTheParentAndBlamesANonReapingContainerInit) {
  Builder b;
  auto init = process(100, 50, "sleep");
  init.nspid = {100, 1};
  b.add(init, in_pod("c1", "pod-a"));
  auto z = process(101, 100, "python3", 'Z');
  z.nspid = {101, 2};
  b.add(z, in_pod("c1", "pod-a"));
  auto found = gpureap::findings::detect_zombies(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].pid, 101);
  EXPECT_NE(found[0].message.find("PID 1"), std::string::npos);
  EXPECT_NE(found[0].advice.find("init"), std::string::npos);
}

TEST(DetectOrphans, AdoptedFromAnotherSessionButNotTheInitsOwnChildren) {
  Builder b;
  auto init = process(100, 50, "tini");
  init.nspid = {100, 1};
  b.add(init, in_pod("c1", "pod-a"));
  auto own = process(101, 100, "app");  // tini's child: own group, tini's session
  own.nspid = {101, 2};
  own.session = 100;
  b.add(own, in_pod("c1", "pod-a"));
  auto adopted = process(120, 100, "gpu_worker");  // session of a dead exec'd shell
  adopted.nspid = {120, 9};
  adopted.session = 110;
  adopted.pgrp = 115;
  adopted.gpu_fds = {{"nvidia0", 4}};
  b.add(adopted, in_pod("c1", "pod-a"));
  auto host_child = process(400, 1, "sshd");  // host processes are never orphans here
  b.add(host_child);
  auto lost = process(500, 1, "stray");  // in a container, adopted by the host's PID 1
  b.add(lost, in_pod("c2", "pod-b"));
  auto found = gpureap::findings::detect_orphans(b.build());
  ASSERT_EQ(found.size(), 2U);
  EXPECT_EQ(found[0].pid, 120);
  EXPECT_NE(found[0].message.find("holds GPU descriptors"), std::string::npos);
  EXPECT_EQ(found[1].pid, 500);
  EXPECT_NE(found[1].message.find("host's PID 1"), std::string::npos);
}

TEST(DetectOrphanedContexts, NamesGroupMembersAndUnlistedHoldersOfTheDevice) {
  Builder b;
  b.device(0, 2048 * kMiB, 615 * kMiB);
  auto child = process(601, 1, "python3");
  child.pgrp = 600;  // the dead creator led its group
  child.gpu_fds = {{"nvidia0", 30}, {"nvidiactl", 1}};
  b.add(child, in_pod("c1", "pod-a"));
  auto other = process(700, 1, "other");  // a holder of the same device, not listed
  other.gpu_fds = {{"nvidia0", 1}};
  b.add(other);
  auto listed = process(800, 1, "trainer");  // has its own context: not an inheritor
  listed.gpu_fds = {{"nvidia0", 5}};
  b.add(listed);
  b.list(0, 600, 2048 * kMiB);
  b.list(0, 800, 1 * kMiB);
  auto found = gpureap::findings::detect_orphaned_contexts(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].severity, Severity::critical);
  EXPECT_EQ(found[0].pid, 600);
  ASSERT_EQ(found[0].holders.size(), 2U);
  EXPECT_EQ(found[0].holders[0].pid, 601);
  EXPECT_EQ(found[0].holders[0].reason, "same process group");
  EXPECT_EQ(found[0].holders[1].pid, 700);
}

TEST(DetectOrphanedContexts, NoHolderSaysSoAndAdvisesAReset) {
  Builder b;
  b.device(0, kMiB, 0);
  b.list(0, 4242, std::nullopt);
  auto found = gpureap::findings::detect_orphaned_contexts(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_TRUE(found[0].holders.empty());
  EXPECT_NE(found[0].message.find("memory n/a"), std::string::npos);
  EXPECT_NE(found[0].advice.find("reset"), std::string::npos);
}

TEST(DetectOrphanedContexts, AZombieCreatorIsStaleAndItsGroupStillNamesTheChild) {
  Builder b;
  b.device(0, 2048 * kMiB, 0);
  auto creator = process(600, 1, "python3", 'Z');
  creator.fds_readable = true;
  b.add(creator);
  auto child = process(601, 600, "python3");
  child.pgrp = 600;
  child.fds_readable = true;
  child.gpu_fds = {{"nvidia0", 30}};
  b.add(child);
  b.list(0, 600, 2048 * kMiB);
  auto snap = b.build();
  auto found = gpureap::findings::detect_orphaned_contexts(snap);
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].pid, 600);
  EXPECT_NE(found[0].message.find("is a zombie and holds no GPU descriptor"), std::string::npos)
      << found[0].message;
  ASSERT_EQ(found[0].holders.size(), 1U);
  EXPECT_EQ(found[0].holders[0].pid, 601);
  EXPECT_EQ(found[0].holders[0].reason, "same process group; child of the zombie 600");
  EXPECT_EQ(gpureap::report::summarize(snap, found).dead_listed, 1U);
}

TEST(Renderers, AStaleListingIsShownAsAnOrphanedContextNotAsItsNewOwner) {
  Builder b;
  b.device(0, 2048 * kMiB, 0);
  auto creator = process(600, 1, "python3", 'Z');
  creator.fds_readable = true;
  b.add(creator);
  auto shell = process(700, 1, "bash");
  shell.fds_readable = true;
  b.add(shell);
  b.list(0, 600, 1024 * kMiB);
  b.list(0, 700, 1024 * kMiB);
  auto snap = b.build();
  const auto found = gpureap::findings::detect_orphaned_contexts(snap);
  const std::string table = gpureap::report::render_trace_table(snap, found);
  EXPECT_NE(table.find("(a zombie now, holds no GPU fd: orphaned context)"), std::string::npos)
      << table;
  EXPECT_NE(table.find("(pid reused by bash: orphaned context)"), std::string::npos) << table;
  const std::string node = gpureap::report::render_node_report(snap, found);
  EXPECT_NE(node.find("bash state S holds no GPU descriptor: not the owner (stale pid)"),
            std::string::npos)
      << node;
}

TEST(DetectOrphanedContexts, AReusedPidNamesTheNewProcessButNotItsGroup) {
  Builder b;
  b.device(0, 2048 * kMiB, 0);
  auto shell = process(600, 1, "bash");  // took pid 600 after the creator died
  shell.fds_readable = true;
  b.add(shell);
  auto shells_job = process(650, 600, "nvidia-smi");  // in the shell's group, own context
  shells_job.pgrp = 600;
  shells_job.fds_readable = true;
  shells_job.gpu_fds = {{"nvidia1", 1}};
  b.add(shells_job);
  auto heir = process(601, 1, "python3");  // the creator's child, in its own group now
  heir.fds_readable = true;
  heir.gpu_fds = {{"nvidia0", 30}};
  b.add(heir);
  b.list(0, 600, 2048 * kMiB);
  auto found = gpureap::findings::detect_orphaned_contexts(b.build());
  ASSERT_EQ(found.size(), 1U);
  EXPECT_NE(found[0].message.find("pid 600 is now bash, which holds no GPU descriptor"),
            std::string::npos)
      << found[0].message;
  ASSERT_EQ(found[0].holders.size(), 1U);
  EXPECT_EQ(found[0].holders[0].pid, 601);
}

TEST(DetectHiddenHolders, SeverityByWhatIsHeldAndWhoHoldsIt) {
  Builder b;
  b.device(0, 0, 0);
  auto ctl_only = process(10, 1, "app");
  ctl_only.gpu_fds = {{"nvidiactl", 1}};
  b.add(ctl_only);
  auto monitor = process(11, 1, "dcgm-exporter");
  monitor.gpu_fds = {{"nvidia0", 1}};
  b.add(monitor);
  auto hidden = process(12, 1, "python3");
  hidden.gpu_fds = {{"nvidia0", 2}};
  b.add(hidden);
  auto self = process(13, 1, "gpureap");
  self.gpu_fds = {{"nvidia0", 1}};
  b.add(self);
  auto worker = process(14, 1, "trainer");  // listed; its descriptions are unknown
  worker.gpu_fds = {{"nvidia0", 20}};
  b.add(worker);
  b.list(0, 14, kGiB);
  auto snap = b.build();
  snap.self_pid = 13;
  auto found = gpureap::findings::detect_hidden_holders(snap, {});
  ASSERT_EQ(found.size(), 3U);
  EXPECT_EQ(found[0].severity, Severity::info);
  EXPECT_EQ(found[1].severity, Severity::info);
  // Whether python3 shares the trainer's descriptions is unknown: it may hold its context.
  EXPECT_EQ(found[2].severity, Severity::warning);
  EXPECT_TRUE(gpureap::findings::fails_check(found));
  found.pop_back();
  EXPECT_FALSE(gpureap::findings::fails_check(found));

  // With nothing listed on the node, no context exists for it to hold: a driver client.
  Builder idle;
  idle.device(0, 0, 0);
  idle.add(hidden);
  auto alone = gpureap::findings::detect_hidden_holders(idle.build(), {});
  ASSERT_EQ(alone.size(), 1U);
  EXPECT_EQ(alone[0].severity, Severity::info);
  EXPECT_NE(alone[0].message.find("a driver client without a GPU context"), std::string::npos)
      << alone[0].message;
}

TEST(DetectHiddenHolders, MessagesNameTheProcessWhereItRunsAndEachDevice) {
  Builder b;
  b.device(0, 0, 0);
  auto host = process(20, 1, "python3");
  host.gpu_fds = {{"nvidia0", 2}, {"nvidiactl", 1}};
  b.add(host);
  auto in_pod_ns = process(21, 1, "worker");
  in_pod_ns.nspid = {21, 7};
  in_pod_ns.gpu_fds = {{"nvidia1", 3}};
  b.add(in_pod_ns, in_pod("c1", "pod-a"));
  auto bare = process(22, 1, "job");  // a container the resolvers found no pod for
  bare.gpu_fds = {{"nvidia-uvm", 1}};
  container::ContainerInfo c;
  c.ref.id = "0123456789abcdef0123";
  c.ref.pod_uid = "uid-9";
  c.deleted = true;
  b.add(bare, c);
  const auto found = gpureap::findings::detect_hidden_holders(b.build(), {});
  ASSERT_EQ(found.size(), 3U);
  EXPECT_EQ(found[0].message,
            "pid 20 (python3), host process holds GPU descriptors (nvidia0×2, nvidiactl×1) but "
            "the driver does not list it: a driver client without a GPU context");
  EXPECT_EQ(found[1].message,
            "pid 21 (worker), local pid 7, pod ns/pod-a container worker holds GPU descriptors "
            "(nvidia1×3) but the driver does not list it: a driver client without a GPU context");
  EXPECT_EQ(found[2].message,
            "pid 22 (job), container 0123456789ab of pod uid uid-9 (deleted) holds GPU "
            "descriptors (nvidia-uvm×1) but the driver does not list it");
}

// ---------------------------------------------------------------- who shares a context
// Open file descriptions are opaque numbers here (the kernel's file objects,
// or kcmp's numbering): equal numbers in two processes are one description.

constexpr std::uint64_t kCtl = 0xa1, kDev0 = 0xa2, kDev1 = 0xa3, kUvm = 0xa4;

// A CUDA-like holder: 20 descriptors on nvidia0, the rest on the control nodes.
proc::Process holder(pid_t pid, pid_t ppid, const char* comm, std::vector<std::uint64_t> files) {
  auto p = process(pid, ppid, comm);
  p.gpu_fds = {{"nvidia-uvm", 2}, {"nvidia0", 20}, {"nvidiactl", 1}};
  std::sort(files.begin(), files.end());
  p.gpu_files = std::move(files);
  return p;
}

// A pynvml monitor: its own descriptions of the same nodes, 8 descriptors.
proc::Process nvml_monitor(pid_t pid) {
  auto p = process(pid, 1, "python3");
  p.gpu_fds = {{"nvidia-uvm", 1}, {"nvidia0", 2}, {"nvidiactl", 5}};
  p.gpu_files = {0xb1, 0xb2, 0xb3, 0xb4};
  return p;
}

const gpureap::findings::Finding* first_of(const std::vector<gpureap::findings::Finding>& found,
                                           Kind k) {
  for (const auto& f : found) {
    if (f.kind == k) return &f;
  }
  return nullptr;
}

TEST(Contexts, ChildrenSharingADeadCreatorsDescriptionsAreItsHoldersAndOneRootCause) {
  // A preforking server: the master (600, gone) forked two workers that
  // inherited its descriptions; launched from a shell, they share neither its
  // group nor its session. Their mappings could not be read. A pynvml monitor
  // next to them maps nothing.
  Builder b;
  b.device(0, 2560 * kMiB, 615 * kMiB);
  auto w1 = holder(601, 1, "python3", {kCtl, kDev0, kDev1, kUvm});
  w1.pgrp = w1.session = 500;
  auto w2 = holder(602, 1, "python3", {kCtl, kDev0, kDev1, kUvm});
  w2.pgrp = w2.session = 500;
  b.add(w1, in_pod("c1", "server"));
  b.add(w2, in_pod("c1", "server"));
  b.add(nvml_monitor(700)).gpu_mappings = std::vector<std::string>{};
  b.list(0, 600, 2560 * kMiB);
  auto snap = b.build();
  auto found = gpureap::findings::detect_all(snap);

  const auto* ctx = first_of(found, Kind::orphaned_context);
  ASSERT_NE(ctx, nullptr);
  ASSERT_EQ(ctx->holders.size(), 2U);
  EXPECT_EQ(ctx->holders[0].pid, 601);
  EXPECT_EQ(ctx->holders[0].reason,
            "shares 4 open file descriptions of its device files with pid 602 (python3)");
  EXPECT_EQ(ctx->holders[1].pid, 602);
  // Their orphan and hidden_holder findings are the same root cause: related, not counted.
  std::vector<std::pair<Kind, pid_t>> related;
  for (const auto& r : ctx->related) related.emplace_back(r.kind, *r.pid);
  EXPECT_EQ(related, (std::vector<std::pair<Kind, pid_t>>{{Kind::orphan, 601},
                                                          {Kind::orphan, 602},
                                                          {Kind::hidden_holder, 601},
                                                          {Kind::hidden_holder, 602}}));
  for (const auto& f : found) {
    EXPECT_FALSE(f.pid && (*f.pid == 601 || *f.pid == 602)) << f.message;
  }
  // The monitor is a driver client: info, not a holder.
  const auto* monitor = first_of(found, Kind::hidden_holder);
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->pid, 700);
  EXPECT_EQ(monitor->severity, Severity::info);
  const auto s = gpureap::report::summarize(snap, found);
  EXPECT_EQ(s.findings, 1U);
  EXPECT_EQ(s.orphans, 0U);
  EXPECT_EQ(s.related, 4U);
  EXPECT_TRUE(gpureap::findings::fails_check(found));
}

TEST(Contexts, OneChildAloneIsNamedByItsGroupOrItsMappings) {
  Builder b;
  b.device(0, 2560 * kMiB, 615 * kMiB);
  auto by_group = holder(601, 1, "python3", {kCtl, kDev0, kUvm});
  by_group.pgrp = 600;  // the creator led its group
  b.add(by_group).gpu_mappings = std::vector<std::string>{"nvidia0"};
  auto by_mapping = holder(611, 1, "python3", {0xc1, 0xc2});
  by_mapping.pgrp = by_mapping.session = 500;
  b.add(by_mapping).gpu_mappings = std::vector<std::string>{"nvidiactl", "nvidia0", "nvidia-uvm"};
  b.add(nvml_monitor(700)).gpu_mappings = std::vector<std::string>{"nvidiactl"};
  b.list(0, 600, 2560 * kMiB);
  b.list(0, 610, 1024 * kMiB);
  auto found = gpureap::findings::detect_orphaned_contexts(b.build());
  ASSERT_EQ(found.size(), 2U);
  ASSERT_EQ(found[0].holders.size(), 2U);
  EXPECT_EQ(found[0].holders[0].pid, 601);
  EXPECT_EQ(found[0].holders[0].reason, "same process group; maps nvidia0");
  // Nothing ties 611 to either creator but its mapping: both may be its; 601
  // is 600's kin, so not 610's.
  EXPECT_EQ(found[0].holders[1].pid, 611);
  EXPECT_EQ(found[0].holders[1].reason, "maps nvidia0, nvidia-uvm");
  ASSERT_EQ(found[1].holders.size(), 1U);
  EXPECT_EQ(found[1].holders[0].pid, 611);
}

TEST(Contexts, TheEvidenceRuleIsData) {
  // Say a driver is measured where only the UVM mapping tells: then a holder
  // mapping only nvidia0 is a driver client; where descriptor counts tell, its
  // count names it; with no rule at all nobody is excluded (named as a holder
  // of the node, the old way).
  auto situation = [] {
    Builder b;
    b.device(0, 2560 * kMiB, 615 * kMiB);
    auto child = holder(611, 1, "python3", {0xc1});
    child.pgrp = child.session = 500;
    b.add(child).gpu_mappings = std::vector<std::string>{"nvidia0"};
    b.list(0, 600, 2560 * kMiB);
    return b.build();
  };
  gpureap::findings::DetectOptions uvm_only;
  uvm_only.context_evidence.mapped_nodes = {"nvidia-uvm"};
  auto found = gpureap::findings::detect_all(situation(), uvm_only);
  ASSERT_NE(first_of(found, Kind::orphaned_context), nullptr);
  EXPECT_TRUE(first_of(found, Kind::orphaned_context)->holders.empty());
  ASSERT_NE(first_of(found, Kind::hidden_holder), nullptr);
  EXPECT_EQ(first_of(found, Kind::hidden_holder)->severity, Severity::info);

  // Or where descriptor counts tell: the child's 20 on nvidia0 are a context's.
  gpureap::findings::DetectOptions by_count = uvm_only;
  by_count.context_evidence.min_gpu_node_fds = 10;
  found = gpureap::findings::detect_all(situation(), by_count);
  ASSERT_EQ(first_of(found, Kind::orphaned_context)->holders.size(), 1U);
  EXPECT_EQ(first_of(found, Kind::orphaned_context)->holders[0].reason,
            "holds 20 descriptors of nvidia0");

  gpureap::findings::DetectOptions no_rule;
  no_rule.context_evidence.mapped_nodes.clear();
  found = gpureap::findings::detect_all(situation(), no_rule);
  ASSERT_EQ(first_of(found, Kind::orphaned_context)->holders.size(), 1U);
  EXPECT_EQ(first_of(found, Kind::orphaned_context)->holders[0].reason,
            "holds nvidia0 and is not listed by the driver");
}

TEST(Contexts, AMonitorOpeningTheNodesItselfIsInfoWhateverItsName) {
  // A live CUDA worker, listed, and an NVML client with descriptions of its own.
  Builder b;
  b.device(0, 2560 * kMiB, 615 * kMiB);
  b.add(holder(800, 1, "python3", {kCtl, kDev0, kUvm}));
  b.add(nvml_monitor(700));
  b.list(0, 800, 2560 * kMiB);
  auto snap = b.build();
  auto found = gpureap::findings::detect_all(snap);
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].kind, Kind::hidden_holder);
  EXPECT_EQ(found[0].pid, 700);
  EXPECT_EQ(found[0].severity, Severity::info);
  EXPECT_NE(found[0].message.find("a driver client without a GPU context"), std::string::npos);
  EXPECT_FALSE(gpureap::findings::fails_check(found));
}

TEST(Contexts, ALiveCreatorsInheritorIsALatentOrphanedContext) {
  Builder b;
  b.device(0, 2560 * kMiB, 615 * kMiB);
  b.add(holder(800, 1, "python3", {kCtl, kDev0, kUvm}));
  b.add(holder(801, 800, "python3", {kCtl, kDev0, kUvm}));
  b.add(nvml_monitor(700));
  b.list(0, 800, 2560 * kMiB);
  auto snap = b.build();
  auto found = gpureap::findings::detect_all(snap);
  const auto* latent = first_of(found, Kind::latent_orphaned_context);
  ASSERT_NE(latent, nullptr);
  EXPECT_EQ(latent->severity, Severity::warning);
  EXPECT_EQ(latent->pid, 800);
  EXPECT_EQ(latent->device, 0U);
  ASSERT_EQ(latent->holders.size(), 1U);
  EXPECT_EQ(latent->holders[0].pid, 801);
  EXPECT_EQ(latent->holders[0].reason,
            "shares 3 open file descriptions of its GPU device files with pid 800 (inherited over "
            "fork)");
  EXPECT_NE(latent->message.find("if pid 800 exits, the context and its memory stay held by it"),
            std::string::npos)
      << latent->message;
  ASSERT_EQ(latent->related.size(), 1U);
  EXPECT_EQ(latent->related[0].kind, Kind::hidden_holder);
  EXPECT_EQ(latent->related[0].pid, 801);
  EXPECT_EQ(latent->related[0].severity, Severity::warning);
  // No orphaned context while the creator lives; the monitor stays info.
  EXPECT_EQ(first_of(found, Kind::orphaned_context), nullptr);
  EXPECT_EQ(gpureap::report::summarize(snap, found).findings, 1U);

  // The JSON names the holders and the related finding; the table indents it.
  const auto doc = gpureap::report::trace_json(snap, found);
  const auto& f = doc["findings"][0];
  EXPECT_EQ(f["kind"], "latent_orphaned_context");
  EXPECT_EQ(f["holders"][0]["pid"], 801);
  EXPECT_EQ(f["related"][0]["kind"], "hidden_holder");
  EXPECT_EQ(f["related"][0]["pid"], 801);
  EXPECT_EQ(doc["summary"]["related"], 1);
  const auto table = gpureap::report::render_trace_table(snap, found);
  EXPECT_NE(table.find("\n      related [warning] hidden_holder: pid 801 (python3)"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("1 findings (1 related grouped under them)"), std::string::npos) << table;
}

TEST(DetectGhostMemory, V2UsedAboveThresholdWithNoListedProcess) {
  Builder b;
  b.device(0, 1024 * kMiB, 615 * kMiB);            // ghost
  b.device(2, 64 * kMiB, 615 * kMiB);              // under the threshold
  b.device(3, 1024 * kMiB, 615 * kMiB);            // has a listed process
  b.add(process(5, 1, "x"));
  b.list(3, 5, 1024 * kMiB);
  auto found = gpureap::findings::detect_ghost_memory(b.build(), {});
  ASSERT_EQ(found.size(), 1U);
  EXPECT_EQ(found[0].device, 0U);
  EXPECT_EQ(found[0].kind, Kind::ghost_memory);
  EXPECT_NE(found[0].message.find("by v2 accounting"), std::string::npos) << found[0].message;
}

TEST(DetectGhostMemory, V1UnexplainedMemoryBeyondTheReservedAllowance) {
  // v1 `used` includes reserved memory: only what no listed process explains
  // beyond the threshold (128 MiB) plus the allowance (1024 MiB) is a ghost.
  Builder b;
  b.device(0, 615 * kMiB, std::nullopt);   // an idle H200 by v1: no ghost
  b.device(1, 3072 * kMiB, std::nullopt);  // 3 GiB, nobody listed: ghost
  b.device(2, 4096 * kMiB, std::nullopt);  // 1 GiB beyond its listed 3 GiB: within
  b.device(3, 5120 * kMiB, std::nullopt);  // 3 GiB beyond its listed 2 GiB: ghost
  b.device(4, 5120 * kMiB, std::nullopt);  // a listed process of unknown size: cannot say
  b.add(process(5, 1, "x"));
  b.list(2, 5, 3072 * kMiB);
  b.list(3, 5, 2048 * kMiB);
  b.list(4, 5, std::nullopt);
  auto found = gpureap::findings::detect_ghost_memory(b.build(), {});
  ASSERT_EQ(found.size(), 2U);
  EXPECT_EQ(found[0].device, 1U);
  EXPECT_EQ(found[1].device, 3U);
  EXPECT_NE(found[1].message.find("5120 MiB used by v1 accounting"), std::string::npos)
      << found[1].message;
  EXPECT_NE(found[1].message.find("3072 MiB of it explained by no listed process"),
            std::string::npos)
      << found[1].message;
  // The allowance is an option: without it the idle GPU's reserved memory is a ghost.
  gpureap::findings::DetectOptions strict;
  strict.v1_reserved_allowance_bytes = 0;
  Builder idle;
  idle.device(0, 615 * kMiB, std::nullopt);
  EXPECT_EQ(gpureap::findings::detect_ghost_memory(idle.build(), strict).size(), 1U);
}

TEST(Report, JsonCarriesSchemaProcessesFindingsAndSummary) {
  Builder b;
  b.device(0, 2048 * kMiB, 615 * kMiB);
  auto worker = process(300, 200, "python3");
  worker.nspid = {300, 5};
  worker.gpu_fds = {{"nvidia0", 3}};
  b.add(worker, in_pod("c1", "pod-a"));
  b.list(0, 300, 2048 * kMiB);
  b.list(0, 301, 512 * kMiB);
  auto snap = b.build();
  auto found = gpureap::findings::detect_all(snap);
  auto doc = gpureap::report::trace_json(snap, found);
  EXPECT_EQ(doc["schema"], 1);
  ASSERT_EQ(doc["processes"].size(), 1U);
  const auto& p = doc["processes"][0];
  EXPECT_EQ(p["pid"], 300);
  EXPECT_EQ(p["ns_pid"], 5);
  EXPECT_EQ(p["gpu_memory"], 2048 * kMiB);
  EXPECT_EQ(p["pod"]["name"], "pod-a");
  EXPECT_EQ(p["pod"]["qos"], "burstable");
  EXPECT_EQ(p["container"]["name"], "worker");
  EXPECT_EQ(doc["dead_listed"][0]["pid"], 301);
  EXPECT_EQ(doc["findings"][0]["kind"], "orphaned_context");
  EXPECT_TRUE(doc["findings"][0].contains("holders"));
  EXPECT_EQ(doc["summary"]["dead_listed"], 1);
  EXPECT_FALSE(doc["summary"]["clean"].get<bool>());
  EXPECT_EQ(doc["gpu"]["devices"][0]["memory"]["reserved"], 615 * kMiB);

  const auto table = gpureap::report::render_trace_table(snap, found);
  for (const char* want : {"PID", "LOCAL_PID", "STATE", "GPU_MEM", "LISTED", "QOS", "POD",
                           "NAMESPACE", "CONTAINER", "pod-a", "2.0 GiB", "DEAD", "advice:"}) {
    EXPECT_NE(table.find(want), std::string::npos) << want << "\n" << table;
  }
  // Streamed, the table is the same text; a write that fails is reported.
  std::FILE* tmp = std::tmpfile();
  ASSERT_NE(tmp, nullptr);
  EXPECT_TRUE(gpureap::report::write_trace_table(tmp, snap, found));
  std::rewind(tmp);
  std::string streamed;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, tmp)) > 0;) streamed.append(buf, n);
  std::fclose(tmp);
  EXPECT_EQ(streamed, table);
  std::FILE* full = std::fopen("/dev/full", "w");
  ASSERT_NE(full, nullptr);
  EXPECT_FALSE(gpureap::report::write_trace_table(full, snap, found));
  std::fclose(full);
}

TEST(Report, InvalidUtf8FromProcIsReplacedNotThrown) {
  // Process names and command lines are arbitrary bytes.
  Builder b;
  b.device(0, kMiB, 0);
  auto p = process(42, 1, "w\xff\xfe");
  p.cmdline = {"/tmp/w\xff\xfe", "--flag"};
  p.gpu_fds = {{"nvidia0", 1}};
  b.add(p);
  b.list(0, 42, kMiB);
  auto snap = b.build();
  std::string text;
  ASSERT_NO_THROW(text = gpureap::report::json_text(gpureap::report::trace_json(snap, {})));
  auto doc = nlohmann::json::parse(text);
  EXPECT_EQ(doc["processes"][0]["comm"], "w\uFFFD\uFFFD");
}

TEST(Report, DirectProcessTextIsByteForByteTheTreesDump) {
  // Every shape a process entry can take: host or pod, with or without pod
  // metadata, deleted, listed with and without a number, several PID levels,
  // and strings that need escaping or are not UTF-8.
  Builder b;
  b.device(0, kMiB, 0);
  b.device(1, kMiB, 0);
  auto host = process(10, 1, "plain");
  host.cmdline = {"/usr/bin/python3", "train.py", "--lr=0.1"};
  host.gpu_fds = {{"nvidia0", 2}, {"nvidiactl", 1}};
  host.uid = 1000;
  b.add(host);
  b.list(0, 10, 3 * kMiB);
  b.list(1, 10, std::nullopt);
  auto odd = process(11, 10, "q\"u\\o\te\n\x01");
  // Well-formed UTF-8 of each length (the writer copies it), ill-formed UTF-8
  // (overlong, surrogate, past U+10FFFF, cut short, a lone continuation: nlohmann
  // replaces it) and each control character's escape.
  odd.cmdline = {"caf\xc3\xa9",
                 "w\xff\xfe",
                 "",
                 "\x7f",
                 "3\xc3\x97"
                 "4 \xe2\x80\xa6",
                 "\xf0\x9f\x98\x80 \xf4\x8f\xbf\xbf \xef\xbf\xbd",
                 "\xc0\xaf",
                 "\xe0\x9f\xbf",
                 "\xed\xa0\x80",
                 "\xf0\x8f\xbf\xbf",
                 "\xf4\x90\x80\x80",
                 "\xe2\x82",
                 "x\x80",
                 "ok \xc3\x97 then \xff",
                 "\x01\x08\x09\x0a\x0b\x0c\x0d\x1f\"\\/"};
  odd.gpu_fds = {{"nvidia1", 1}};
  odd.nspid = {11, 7, 1};
  b.add(odd, in_pod("c1", "pod-a"));
  auto bare = process(12, 1, "bare", 'D');
  bare.gpu_fds = {{"nvidia-510:1", 4}};
  container::ContainerInfo no_meta;
  no_meta.ref.id = std::string(64, 'f');
  no_meta.ref.runtime = container::Runtime::crio;
  no_meta.ref.pod_uid = "";
  no_meta.deleted = true;
  b.add(bare, no_meta);
  auto empty_pod = process(13, 1, "");
  empty_pod.gpu_fds = {{"nvidia0", 1}};
  auto c = in_pod("c2", "");
  c.meta->pod_namespace = "";
  b.add(empty_pod, c);
  auto snap = b.build();

  const auto tree = gpureap::report::trace_json(snap, {});
  ASSERT_EQ(tree["processes"].size(), 4u);
  for (std::size_t i = 0; i < tree["processes"].size(); ++i) {
    const auto pid = tree["processes"][i]["pid"].get<pid_t>();
    const auto* r = snap.find(pid);
    ASSERT_NE(r, nullptr);
    EXPECT_EQ(gpureap::report::process_json_text(snap, *r), gpureap::report::json_text(tree["processes"][i], -1))
        << "pid " << pid;
  }
}

}  // namespace

namespace {

TEST(Report, StreamedJsonIsTheSameDocumentAsTheTree) {
  Builder b;
  b.device(0, 2048 * kMiB, 615 * kMiB);
  auto worker = process(300, 200, "python3");
  worker.gpu_fds = {{"nvidia0", 3}};
  b.add(worker, in_pod("c1", "pod-a"));
  b.add(process(301, 200, "z", 'Z'));
  b.list(0, 300, 2048 * kMiB);
  b.list(0, 999, kMiB);
  auto snap = b.build();
  const auto found = gpureap::findings::detect_all(snap);
  char* buf = nullptr;
  std::size_t len = 0;
  std::FILE* mem = ::open_memstream(&buf, &len);
  ASSERT_NE(mem, nullptr);
  ASSERT_TRUE(gpureap::report::write_trace_json(mem, snap, found));
  std::fclose(mem);
  const std::string text(buf, len);
  std::free(buf);
  auto streamed = nlohmann::json::parse(text);
  EXPECT_EQ(streamed, gpureap::report::trace_json(snap, found));
  EXPECT_EQ(streamed["processes"].size(), 2U);  // the GPU worker and the zombie a finding names

  // Empty arrays are still arrays.
  NodeSnapshot empty;
  mem = ::open_memstream(&buf, &len);
  ASSERT_TRUE(gpureap::report::write_trace_json(mem, empty, {}));
  std::fclose(mem);
  auto doc = nlohmann::json::parse(std::string(buf, len));
  std::free(buf);
  EXPECT_TRUE(doc["processes"].is_array() && doc["processes"].empty());
  EXPECT_EQ(doc, gpureap::report::trace_json(empty, {}));

  // A document of many 64 KiB pieces (2,000 holders, one line over 64 KiB among
  // them) is the tree too, cut nowhere it should not be.
  Builder many;
  many.device(0, 2048 * kMiB, 615 * kMiB);
  for (pid_t pid = 1000; pid < 3000; ++pid) {
    auto holder = process(pid, 1, "python3");
    holder.cmdline = {"python3", "serve.py", std::string(pid == 2000 ? 70000 : 40, 'a')};
    holder.gpu_fds = {{"nvidia0", 2}};
    many.add(holder);
  }
  auto big = many.build();
  const auto big_found = gpureap::findings::detect_all(big);
  mem = ::open_memstream(&buf, &len);
  ASSERT_TRUE(gpureap::report::write_trace_json(mem, big, big_found));
  std::fclose(mem);
  const std::string big_text(buf, len);
  std::free(buf);
  EXPECT_GT(big_text.size(), 20U * 64 * 1024);
  EXPECT_EQ(nlohmann::json::parse(big_text), gpureap::report::trace_json(big, big_found));

  // A stream that fails its writes (/dev/full: ENOSPC) is reported, not ignored.
  std::FILE* full = std::fopen("/dev/full", "w");
  ASSERT_NE(full, nullptr);
  EXPECT_FALSE(gpureap::report::write_trace_json(full, snap, found));
  std::fclose(full);
}

TEST(JsonText, FindingsAreWrittenByteForByteAsTheTree) {
  using gpureap::findings::Finding;
  std::vector<Finding> found;
  Finding z;
  z.kind = Kind::zombie;
  z.severity = Severity::warning;
  z.pid = 101;
  z.pids = {101, 102, 103};
  z.message = "3 zombies of \"sh\" (pid 100)\n";
  z.advice = "run an init";
  found.push_back(z);
  Finding ctx;
  ctx.kind = Kind::orphaned_context;
  ctx.severity = Severity::critical;
  ctx.pid = 600;
  ctx.device = 1;
  ctx.message = std::string("bad utf-8 \xff\xfe here, tab\t");
  ctx.advice = "end them";
  ctx.holders = {{601, "python3", "same process group"}, {700, "w\\x", "holds nvidia1"}};
  Finding related;
  related.kind = Kind::hidden_holder;
  related.severity = Severity::warning;
  related.pid = 601;
  related.message = "holds \"nvidia1\"";
  ctx.related = {related, related};
  found.push_back(ctx);
  Finding latent;
  latent.kind = Kind::latent_orphaned_context;
  latent.severity = Severity::warning;
  latent.pid = 800;
  latent.device = 0;
  latent.holders = {{801, "python3", "shares 3 open file descriptions"}};
  found.push_back(latent);
  Finding none;
  none.kind = Kind::orphaned_context;  // no holder at all
  none.severity = Severity::critical;
  none.pid = 4242;
  found.push_back(none);
  Finding ghost;
  ghost.kind = Kind::ghost_memory;
  ghost.severity = Severity::warning;
  ghost.device = 0;  // no pid
  ghost.message = "ghost";
  found.push_back(ghost);
  Finding nccl;
  nccl.kind = Kind::nccl_missing_rank;
  nccl.severity = Severity::critical;
  nccl.pid = 4102;
  auto g = std::make_shared<gpureap::findings::NcclGroup>();
  g->scope = "host";
  g->run_id = "job-a";
  nccl.group = g;
  found.push_back(nccl);

  Builder b;
  const auto tree = gpureap::report::trace_json(b.build(), found);
  ASSERT_EQ(tree["findings"].size(), found.size());
  for (std::size_t i = 0; i < found.size(); ++i) {
    EXPECT_EQ(gpureap::report::finding_json_text(found[i]), gpureap::report::json_text(tree["findings"][i], -1))
        << "finding " << i;
  }
}

// Strings are copied eight plain bytes at a time: every byte that is not plain
// (control, quote, backslash, DEL's neighbours, UTF-8 leads and continuations,
// ill-formed bytes) at every offset of a word and around its edges, in strings
// of every length up to three words, must come out as nlohmann writes it.
TEST(JsonText, StringsAreEscapedByteForByteAtEveryOffset) {
  using gpureap::findings::Finding;
  const std::vector<std::string> specials = {std::string(1, '\0'),
                                             "\x01",
                                             "\x1f",
                                             " ",
                                             "\"",
                                             "\\",
                                             "~",
                                             "\x7f",
                                             "\xc3\x97" /* × */,
                                             "\xe2\x82\xac" /* € */,
                                             "\xf0\x9f\x98\x80",
                                             "\x80",
                                             "\xff",
                                             "\xc3" /* cut */,
                                             "\n"};
  Builder b;
  std::vector<Finding> found;
  for (std::size_t len = 0; len <= 24; ++len) {
    for (std::size_t at = 0; at <= len; ++at) {
      for (const auto& special : specials) {
        Finding f;
        f.kind = Kind::hidden_holder;
        f.severity = Severity::info;
        f.message = std::string(len, 'a');
        f.message.insert(at, special);
        f.advice = std::string(len, 'b') + special;
        found.push_back(std::move(f));
      }
    }
  }
  const auto tree = gpureap::report::trace_json(b.build(), found);
  ASSERT_EQ(tree["findings"].size(), found.size());
  for (std::size_t i = 0; i < found.size(); ++i) {
    ASSERT_EQ(gpureap::report::finding_json_text(found[i]),
              gpureap::report::json_text(tree["findings"][i], -1))
        << "message " << ::testing::PrintToString(found[i].message);
  }
}

}  // namespace
