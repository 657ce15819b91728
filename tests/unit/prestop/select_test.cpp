// Target selection over built snapshots: every rule of "who may be signalled".
#include <gtest/gtest.h>

#include <algorithm>
#include <map>

#include "prestop/select.hpp"
#include "prestop/self.hpp"

namespace {

using gpureap::node::DriverListing;
using gpureap::node::NodeSnapshot;
using gpureap::node::ProcessRecord;
using gpureap::prestop::select_targets;
using gpureap::prestop::SelectOptions;
using gpureap::prestop::Selection;
using gpureap::prestop::SelfIdentity;
using gpureap::prestop::SkipReason;

constexpr std::uint64_t kOurNs = 4026532100;
constexpr std::uint64_t kNestedNs = 4026532200;
const std::string kOurCtr(64, 'a');
const std::string kOtherCtr(64, 'b');

ProcessRecord rec(pid_t pid, std::string comm, unsigned gpu_fds, std::optional<std::string> ctr = std::nullopt,
                  char state = 'S') {
  ProcessRecord r;
  r.process.pid = pid;
  r.process.tgid = pid;
  r.process.comm = std::move(comm);
  r.process.state = state;
  r.process.start_time = 1000U + static_cast<std::uint64_t>(pid);
  r.process.nspid = {pid};
  r.process.fds_readable = true;
  if (gpu_fds > 0) r.process.gpu_fds = {{"nvidia0", gpu_fds}};
  if (ctr) {
    gpureap::container::ContainerInfo ci;
    ci.ref.id = *ctr;
    r.container = std::make_shared<const gpureap::container::ContainerInfo>(ci);
  }
  return r;
}

// Records sorted by pid; the driver's PIDs matched as take_snapshot does.
NodeSnapshot snapshot(std::vector<ProcessRecord> records, const std::vector<std::uint32_t>& driver_pids = {}) {
  NodeSnapshot s;
  std::sort(records.begin(), records.end(),
            [](const ProcessRecord& a, const ProcessRecord& b) { return a.process.pid < b.process.pid; });
  s.records = std::move(records);
  s.gpu_descriptors_visible = true;
  for (const std::uint32_t drv : driver_pids) {
    DriverListing l;
    l.device_index = 0;
    l.entry.pid = drv;
    l.entry.used_memory = 256ULL << 20;
    s.listings.push_back(l);
  }
  gpureap::node::match_listings(s, nullptr);
  return s;
}

SelfIdentity self(pid_t pid = 50, std::optional<std::string> ctr = std::nullopt) {
  return SelfIdentity{pid, kOurNs, std::move(ctr)};
}

Selection select(const NodeSnapshot& s, const SelfIdentity& me, std::map<pid_t, std::uint64_t> ns = {},
                 SelectOptions o = {}) {
  return select_targets(
      s, me,
      [ns](pid_t pid) -> std::optional<std::uint64_t> {
        auto it = ns.find(pid);
        if (it == ns.end()) return kOurNs;
        if (it->second == 0) return std::nullopt;
        return it->second;
      },
      o);
}

std::vector<pid_t> target_pids(const Selection& s) {
  std::vector<pid_t> out;
  for (const auto& t : s.targets) out.push_back(t.pid);
  return out;
}

std::optional<SkipReason> skip_of(const Selection& s, pid_t pid) {
  for (const auto& k : s.skipped) {
    if (k.pid && *k.pid == pid) return k.reason;
  }
  return std::nullopt;
}

TEST(PrestopSelect, DescriptorHoldersAndListedHoldersAreTargetsWithTheirListings) {
  auto s = snapshot({rec(1, "tini", 0), rec(7, "python3", 3), rec(8, "python3", 2), rec(9, "bash", 0)}, {7});
  auto sel = select(s, self());
  EXPECT_EQ(target_pids(sel), (std::vector<pid_t>{7, 8}));
  EXPECT_EQ(sel.targets[0].driver_pids, (std::vector<std::uint32_t>{7}));
  EXPECT_EQ(sel.targets[0].devices, (std::vector<unsigned>{0}));
  EXPECT_EQ(sel.targets[0].gpu_memory, std::optional<std::uint64_t>(256ULL << 20));
  EXPECT_EQ(sel.targets[0].start_time, 1007U);
  EXPECT_TRUE(sel.targets[1].driver_pids.empty());
  EXPECT_EQ(sel.targets[1].gpu_fds, 2U);
  EXPECT_TRUE(sel.skipped.empty());  // non-GPU processes are not even mentioned
}

TEST(PrestopSelect, NeverPid1UnlessAskedNeverSelfNeverZombies) {
  auto s = snapshot({rec(1, "worker", 3), rec(50, "gpureap", 4), rec(60, "dead", 1, std::nullopt, 'Z')}, {1});
  auto sel = select(s, self(50));
  EXPECT_TRUE(sel.targets.empty());
  EXPECT_EQ(skip_of(sel, 1), SkipReason::pid1);
  EXPECT_EQ(skip_of(sel, 50), SkipReason::self);
  EXPECT_EQ(skip_of(sel, 60), SkipReason::zombie);

  SelectOptions with_pid1;
  with_pid1.include_pid1 = true;
  auto sel1 = select(s, self(50), {}, with_pid1);
  EXPECT_EQ(target_pids(sel1), (std::vector<pid_t>{1}));
}

TEST(PrestopSelect, OnlyOurPidNamespaceAndOnlyIdentifiedNamespaces) {
  auto s = snapshot({rec(7, "worker", 1), rec(8, "nested", 1), rec(9, "hidden", 1)});
  auto sel = select(s, self(), {{8, kNestedNs}, {9, 0}});
  EXPECT_EQ(target_pids(sel), (std::vector<pid_t>{7}));
  EXPECT_EQ(skip_of(sel, 8), SkipReason::other_pid_namespace);
  EXPECT_EQ(skip_of(sel, 9), SkipReason::pid_namespace_unreadable);
}

TEST(PrestopSelect, InAContainerOnlyOurContainer) {
  // A shared PID namespace (shareProcessNamespace): the sidecar's GPU user is not ours.
  auto s = snapshot({rec(7, "worker", 1, kOurCtr), rec(8, "sidecar", 1, kOtherCtr), rec(9, "hostproc", 1)});
  auto sel = select(s, self(50, kOurCtr));
  EXPECT_EQ(target_pids(sel), (std::vector<pid_t>{7}));
  EXPECT_EQ(skip_of(sel, 8), SkipReason::other_container);
  EXPECT_EQ(skip_of(sel, 9), SkipReason::other_container);
  // Outside any container only the PID namespace restricts.
  EXPECT_EQ(target_pids(select(s, self())), (std::vector<pid_t>{7, 8, 9}));
}

TEST(PrestopSelect, DriverPidsThatNameNothingOrANonHolderAreNeverSignalled) {
  // Host PIDs seen from inside the container: 31337 names nothing here; 12
  // happens to be the local pid of a shell that holds no GPU descriptor.
  auto s = snapshot({rec(7, "worker", 2), rec(12, "bash", 0)}, {31337, 12});
  auto sel = select(s, self());
  EXPECT_EQ(target_pids(sel), (std::vector<pid_t>{7}));
  EXPECT_EQ(skip_of(sel, 12), SkipReason::no_gpu_descriptor);
  EXPECT_EQ(s.listings[1].match, gpureap::node::PidMatch::stale);
  bool dead_logged = false;
  bool stale_logged = false;
  for (const auto& k : sel.skipped) {
    if (k.reason == SkipReason::not_a_process_here && k.driver_pid == 31337U) {
      dead_logged = true;
      EXPECT_EQ(gpureap::prestop::describe(k),
                "driver pid 31337 is not a process of this container (host PID?): not signalled");
    }
    if (k.reason == SkipReason::no_gpu_descriptor) {
      stale_logged = true;
      EXPECT_EQ(gpureap::prestop::describe(k),
                "driver pid 12 names pid 12 (bash) here, which holds no GPU descriptor (host PID?): "
                "not signalled");
    }
  }
  EXPECT_TRUE(dead_logged);
  EXPECT_TRUE(stale_logged);
}

TEST(PrestopSelect, EmptyContainerSelectsNothing) {
  auto sel = select(snapshot({rec(1, "sleep", 0), rec(50, "gpureap", 0)}), self());
  EXPECT_TRUE(sel.targets.empty());
  EXPECT_TRUE(sel.skipped.empty());
}

TEST(PrestopSelf, ParsesNamespaceLinks) {
  EXPECT_EQ(gpureap::prestop::parse_ns_link("pid:[4026531836]"), std::optional<std::uint64_t>(4026531836ULL));
  EXPECT_EQ(gpureap::prestop::parse_ns_link("net:[4026531836]"), std::nullopt);
  EXPECT_EQ(gpureap::prestop::parse_ns_link("pid:[]"), std::nullopt);
  EXPECT_EQ(gpureap::prestop::parse_ns_link("pid:[12x]"), std::nullopt);
  EXPECT_EQ(gpureap::prestop::parse_ns_link("pid:4026531836"), std::nullopt);
  EXPECT_EQ(gpureap::prestop::parse_ns_link(""), std::nullopt);
}

}  // namespace
