// gpureap trace against real processes: real PID namespaces, real cgroups with
// kubelet's names (v1 memory and v2 where this host has them), a real runc
// container whose spec carries the CRI annotations, and the simulated GPU.
// The fake host root is a directory whose proc/ is the real /proc and whose
// run/ holds the runtime state files the resolvers read.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "sys/pidfd.hpp"
#include "test_support.hpp"

namespace {

using gpureap::testing::Cgroup;
using gpureap::testing::Child;
using gpureap::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

const std::string kGpureap = GPUREAP_BIN;
const std::string kWorker = GPUREAP_WORKER_BIN;
const std::string kContextHelper = GPUREAP_CONTEXT_HELPER;
constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

// Kills, by pidfd, processes the test made indirectly (a worker's forked child,
// a workload inside a namespace) and reaps them: the test binary is a child
// subreaper, so they are reparented to it when their parents die.
class Strays {
 public:
  void add(pid_t pid) {
    auto fd = gpureap::sys::pidfd_open(pid);
    if (fd) fds_.push_back(std::move(fd.value()));
  }
  ~Strays() {
    for (auto& fd : fds_) {
      if (gpureap::sys::pidfd_send_signal(fd.get(), SIGKILL)) {
        (void)gpureap::sys::pidfd_wait_exit(fd.get(), 10000);
      }
    }
    // Reap whatever was reparented to us; only our own descendants can be.
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }

 private:
  std::vector<gpureap::sys::UniqueFd> fds_;
};

std::string annotations_spec(const std::string& pod, const std::string& ns, const std::string& uid,
                             const std::string& container) {
  json spec = {{"ociVersion", "1.0.2"},
               {"annotations",
                {{"io.kubernetes.cri.container-type", "container"},
                 {"io.kubernetes.cri.sandbox-name", pod},
                 {"io.kubernetes.cri.sandbox-namespace", ns},
                 {"io.kubernetes.cri.sandbox-uid", uid},
                 {"io.kubernetes.cri.container-name", container}}}};
  return spec.dump(2);
}

json ready_line(Child& c) {
  auto line = c.read_line();
  if (!line) return json();
  return json::parse(*line, nullptr, false);
}

// The host PID of the only child of `parent` (unshare --fork's workload). Scans
// /proc for its PPid: kernels without CONFIG_PROC_CHILDREN have no children file.
pid_t only_child(pid_t parent) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    const std::string status = gpureap::testing::read_file(entry.path().string() + "/status");
    const auto at = status.find("\nPPid:\t");
    if (at != std::string::npos && std::stol(status.substr(at + 7)) == parent) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

const json* find_process(const json& doc, pid_t pid) {
  for (const auto& p : doc["processes"]) {
    if (p["pid"].get<pid_t>() == pid) return &p;
  }
  return nullptr;
}

std::vector<const json*> findings_of(const json& doc, const std::string& kind) {
  std::vector<const json*> out;
  for (const auto& f : doc["findings"]) {
    if (f["kind"] == kind) out.push_back(&f);
  }
  return out;
}

class TraceIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "integration tests need root (cgroups, namespaces, runc)";
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    sim_dir_ = tmp_ / "sim";
    host_ = tmp_ / "host";
    fs::create_directories(host_);
    fs::create_directory_symlink("/proc", host_ + "/proc");
    env_ = {"GPUREAP_SIM_DIR=" + sim_dir_};
    auto init = gpureap::testing::run({kWorker, "init-sim", "--devices", "2"}, env_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  // The node is the real one: other tests' processes (zombies, say) may share it,
  // so a scenario asserts on its own processes and findings, and on exit 1 only
  // where it planted a finding itself.
  json trace(std::optional<int> expected_exit = std::nullopt,
             const std::string& fd_source = "auto") {
    auto r = gpureap::testing::run({kGpureap, "trace", "--host-root", host_, "--gpu", "sim",
                                    "--json", "--fd-source", fd_source},
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

  // A sim worker that created a context of `bytes` on device 0 and forked a
  // child inheriting its descriptors. The child goes to `strays`: it is
  // reparented to this subreaper when the creator dies. child is -1 on failure.
  struct ForkedContext {
    Child creator;
    pid_t child = -1;
  };
  ForkedContext fork_after_init(std::uint64_t bytes, Strays& strays) {
    ForkedContext f{Child::spawn({kWorker, "fork-after-init", "--gpu", "sim", "--device", "0",
                                  "--bytes", std::to_string(bytes)},
                                 env_)};
    json ready = ready_line(f.creator);
    EXPECT_TRUE(ready.contains("child")) << ready.dump();
    if (ready.contains("child")) {
      f.child = ready["child"].get<pid_t>();
      strays.add(f.child);
    }
    return f;
  }

  // trace_context_helper fork-children: a creator whose context `n` forked
  // children inherited. The children go to `strays`.
  struct Prefork {
    Child creator;
    std::vector<pid_t> children;
  };
  Prefork prefork(unsigned n, std::uint64_t bytes, bool group_leader, Strays& strays) {
    std::vector<std::string> argv{kContextHelper, "fork-children", std::to_string(n),
                                  std::to_string(bytes)};
    if (group_leader) argv.emplace_back("--group-leader");
    Prefork p{Child::spawn(argv, env_), {}};
    json ready = ready_line(p.creator);
    EXPECT_TRUE(ready.contains("children")) << ready.dump();
    if (ready.contains("children")) {
      for (const auto& c : ready["children"]) {
        p.children.push_back(c.get<pid_t>());
        strays.add(p.children.back());
      }
    }
    return p;
  }

  std::string containerd_spec_path(const std::string& id) const {
    return host_ + "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id + "/config.json";
  }

  TempDir tmp_;
  std::string sim_dir_;
  std::string host_;
  std::vector<std::string> env_;
};

TEST_F(TraceIntegration, MapsNamespacedWorkersInKubeletCgroupsToTheirPods) {
  const auto v1 = gpureap::testing::cgroup_v1_memory_mount();
  const auto v2 = gpureap::testing::cgroup_v2_mount();
  ASSERT_TRUE(v1 || v2) << "no cgroup hierarchy mounted";

  // Pod A: containerd, systemd driver, burstable; its worker is PID 1 of its own
  // PID namespace. In the v1 memory hierarchy where there is one.
  const std::string uid_a = gpureap::testing::random_uuid();
  std::string uid_a_us = uid_a;
  std::replace(uid_a_us.begin(), uid_a_us.end(), '-', '_');
  const std::string id_a = gpureap::testing::random_hex(64);
  const std::string path_a = "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" +
                             uid_a_us + ".slice/cri-containerd-" + id_a + ".scope";
  gpureap::testing::write_file(containerd_spec_path(id_a),
                               annotations_spec("trainer-a", "ml", uid_a, "worker"));
  Cgroup cg_a(v1 ? *v1 : *v2, path_a);
  Strays strays;  // after the cgroups: its processes die before the cgroups are removed

  Child unshare_a = Child::spawn({"/usr/bin/unshare", "--pid", "--fork", "--kill-child", kWorker,
                                  "hold", "--gpu", "sim", "--device", "0", "--bytes",
                                  std::to_string(2048 * kMiB)},
                                 env_);
  json ready_a = ready_line(unshare_a);
  ASSERT_FALSE(ready_a.is_null()) << "worker A did not start";
  const pid_t worker_a = only_child(unshare_a.pid());
  ASSERT_GT(worker_a, 0);
  strays.add(worker_a);
  cg_a.add(worker_a);

  // Pod B: CRI-O, cgroupfs driver, besteffort, in the v2 hierarchy where there is one.
  const std::string uid_b = gpureap::testing::random_uuid();
  const std::string id_b = gpureap::testing::random_hex(64);
  gpureap::testing::write_file(
      host_ + "/run/containers/storage/overlay-containers/" + id_b + "/userdata/config.json",
      json({{"annotations",
             {{"io.kubernetes.pod.name", "infer-b"},
              {"io.kubernetes.pod.namespace", "serving"},
              {"io.kubernetes.pod.uid", uid_b},
              {"io.kubernetes.container.name", "server"}}}})
          .dump());
  Cgroup cg_b(v2 ? *v2 : *v1, "/kubepods/besteffort/pod" + uid_b + "/crio-" + id_b);
  Child worker_b = Child::spawn(
      {kWorker, "hold", "--gpu", "sim", "--device", "1", "--bytes", std::to_string(512 * kMiB)},
      env_);
  ASSERT_FALSE(ready_line(worker_b).is_null());
  cg_b.add(worker_b.pid());

  // Pod D: its runtime state is gone (no spec anywhere), its process lives on.
  const std::string uid_d = gpureap::testing::random_uuid();
  const std::string id_d = gpureap::testing::random_hex(64);
  Cgroup cg_d(v1 ? *v1 : *v2, "/kubepods/burstable/pod" + uid_d + "/" + id_d);
  Child worker_d = Child::spawn(
      {kWorker, "hold", "--gpu", "sim", "--device", "0", "--bytes", std::to_string(256 * kMiB)},
      env_);
  ASSERT_FALSE(ready_line(worker_d).is_null());
  cg_d.add(worker_d.pid());

  json doc = trace();
  ASSERT_EQ(doc["schema"], 1);

  const json* a = find_process(doc, worker_a);
  ASSERT_NE(a, nullptr) << doc.dump(2);
  EXPECT_EQ((*a)["ns_pid"], 1);
  EXPECT_TRUE((*a)["listed"].get<bool>());
  EXPECT_EQ((*a)["gpu_memory"], 2048 * kMiB);
  EXPECT_EQ((*a)["pod"]["name"], "trainer-a");
  EXPECT_EQ((*a)["pod"]["namespace"], "ml");
  EXPECT_EQ((*a)["pod"]["uid"], uid_a);
  EXPECT_EQ((*a)["pod"]["qos"], "burstable");
  EXPECT_EQ((*a)["container"]["name"], "worker");
  EXPECT_EQ((*a)["container"]["id"], id_a);
  EXPECT_EQ((*a)["container"]["runtime"], "containerd");

  const json* b = find_process(doc, worker_b.pid());
  ASSERT_NE(b, nullptr);
  EXPECT_EQ((*b)["pod"]["name"], "infer-b");
  EXPECT_EQ((*b)["pod"]["namespace"], "serving");
  EXPECT_EQ((*b)["pod"]["qos"], "besteffort");
  EXPECT_EQ((*b)["container"]["runtime"], "crio");
  EXPECT_EQ((*b)["container"]["name"], "server");
  EXPECT_EQ((*b)["gpu_memory"], 512 * kMiB);

  const json* d = find_process(doc, worker_d.pid());
  ASSERT_NE(d, nullptr);
  EXPECT_TRUE((*d)["container"]["deleted"].get<bool>());
  EXPECT_EQ((*d)["pod"]["uid"], uid_d);
  EXPECT_EQ((*d)["container"]["id"], id_d);

  // Every worker is listed and mapped: nothing is wrong with them.
  EXPECT_EQ(doc["summary"]["dead_listed"], 0);
  for (const auto& f : doc["findings"]) {
    if (f["pid"].is_null()) continue;
    const auto pid = f["pid"].get<pid_t>();
    EXPECT_TRUE(pid != worker_a && pid != worker_b.pid() && pid != worker_d.pid()) << f.dump(2);
  }
}

TEST_F(TraceIntegration, ForkInheritedContextIsAnOrphanedContextNamingTheChild) {
  Strays strays;
  auto [creator, child] = fork_after_init(1024 * kMiB, strays);
  ASSERT_GT(child, 0);
  const pid_t dead = creator.pid();

  // While the creator lives, it is listed and the child is a hidden holder.
  json before = trace(1);
  ASSERT_NE(find_process(before, dead), nullptr);
  EXPECT_TRUE((*find_process(before, dead))["listed"].get<bool>());

  creator.kill_and_reap();
  json doc = trace(1);
  auto ctx = findings_of(doc, "orphaned_context");
  ASSERT_EQ(ctx.size(), 1U) << doc.dump(2);
  EXPECT_EQ((*ctx[0])["pid"], dead);
  EXPECT_EQ((*ctx[0])["severity"], "critical");
  bool named = false;
  for (const auto& h : (*ctx[0])["holders"]) named = named || h["pid"].get<pid_t>() == child;
  EXPECT_TRUE(named) << ctx[0]->dump(2);
  ASSERT_EQ(doc["dead_listed"].size(), 1U);
  EXPECT_EQ(doc["dead_listed"][0]["used_memory"], 1024 * kMiB);

  // The table shows the dead PID too.
  auto table = gpureap::testing::run({kGpureap, "trace", "--host-root", host_, "--gpu", "sim"}, env_);
  EXPECT_EQ(table.exit_code, 1);
  EXPECT_NE(table.out.find("DEAD"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("orphaned_context"), std::string::npos);
}

const json* finding_about(const json& doc, const std::string& kind, pid_t pid) {
  for (const auto& f : doc["findings"]) {
    if (f["kind"] == kind && f["pid"] == pid) return &f;
  }
  return nullptr;
}

std::vector<pid_t> holder_pids(const json& finding) {
  std::vector<pid_t> out;
  for (const auto& h : finding["holders"]) out.push_back(h["pid"].get<pid_t>());
  return out;
}

// Issue 12: a preforking server's master dies; its workers keep the context.
// One orphaned_context names both (they share its open file descriptions), their
// hidden_holder findings are related to it, not findings of their own; a
// driver client next to them is info. The same through the /proc walk (kcmp).
TEST_F(TraceIntegration, ChildrenOfADeadCreatorAreOneOrphanedContext) {
  Strays strays;
  auto server = prefork(2, 1024 * kMiB, false, strays);
  ASSERT_EQ(server.children.size(), 2U);
  Child monitor = Child::spawn({kContextHelper, "driver-client"}, env_);
  ASSERT_FALSE(ready_line(monitor).is_null());
  const pid_t dead = server.creator.pid();
  server.creator.kill_and_reap();

  for (const char* source : {"bpf", "procfs"}) {
    SCOPED_TRACE(source);
    json doc = trace(1, source);
    const json* ctx = finding_about(doc, "orphaned_context", dead);
    ASSERT_NE(ctx, nullptr) << doc["findings"].dump(2);
    EXPECT_EQ(holder_pids(*ctx), server.children) << ctx->dump(2);
    for (const auto& h : (*ctx)["holders"]) {
      EXPECT_NE(h["reason"].get<std::string>().find("open file description"), std::string::npos)
          << h;
    }
    std::vector<pid_t> related;
    for (const auto& r : (*ctx)["related"]) {
      EXPECT_EQ(r["kind"], "hidden_holder") << r;
      related.push_back(r["pid"].get<pid_t>());
    }
    EXPECT_EQ(related, server.children);
    for (const auto& f : doc["findings"]) {
      if (f["pid"].is_null()) continue;
      const auto pid = f["pid"].get<pid_t>();
      EXPECT_TRUE(pid != server.children[0] && pid != server.children[1]) << f.dump(2);
    }
    const json* client = finding_about(doc, "hidden_holder", monitor.pid());
    ASSERT_NE(client, nullptr) << doc["findings"].dump(2);
    EXPECT_EQ((*client)["severity"], "info");
    EXPECT_NE((*client)["message"].get<std::string>().find("a driver client without a GPU context"),
              std::string::npos);
  }

  // The table indents the related findings under their root cause.
  auto table =
      gpureap::testing::run({kGpureap, "trace", "--host-root", host_, "--gpu", "sim"}, env_);
  EXPECT_EQ(table.exit_code, 1);
  EXPECT_NE(table.out.find("      related [warning] hidden_holder: pid " +
                           std::to_string(server.children[0])),
            std::string::npos)
      << table.out;
}

// One child alone, outside its dead creator's group and session: its mapping
// of the GPU's files names it; a driver client's lack of one does not.
TEST_F(TraceIntegration, OneChildAloneOfADeadCreatorIsNamedByItsMapping) {
  Strays strays;
  auto server = prefork(1, 512 * kMiB, false, strays);
  ASSERT_EQ(server.children.size(), 1U);
  Child monitor = Child::spawn({kContextHelper, "driver-client"}, env_);
  ASSERT_FALSE(ready_line(monitor).is_null());
  const pid_t dead = server.creator.pid();
  server.creator.kill_and_reap();

  json doc = trace(1);
  const json* ctx = finding_about(doc, "orphaned_context", dead);
  ASSERT_NE(ctx, nullptr) << doc["findings"].dump(2);
  ASSERT_EQ(holder_pids(*ctx), server.children) << ctx->dump(2);
  EXPECT_EQ((*ctx)["holders"][0]["reason"], "maps nvidia0, nvidia-uvm");
  ASSERT_EQ((*ctx)["related"].size(), 1U);
  EXPECT_EQ((*ctx)["related"][0]["pid"], server.children[0]);
  EXPECT_EQ(finding_about(doc, "hidden_holder", server.children[0]), nullptr);
  const json* client = finding_about(doc, "hidden_holder", monitor.pid());
  ASSERT_NE(client, nullptr);
  EXPECT_EQ((*client)["severity"], "info");
}

// The same child, in its creator's group: the group says it first.
TEST_F(TraceIntegration, OneChildInItsDeadCreatorsGroupIsNamedByTheGroup) {
  Strays strays;
  auto server = prefork(1, 512 * kMiB, true, strays);
  ASSERT_EQ(server.children.size(), 1U);
  const pid_t dead = server.creator.pid();
  server.creator.kill_and_reap();
  json doc = trace(1);
  const json* ctx = finding_about(doc, "orphaned_context", dead);
  ASSERT_NE(ctx, nullptr) << doc["findings"].dump(2);
  ASSERT_EQ(holder_pids(*ctx), server.children);
  EXPECT_EQ((*ctx)["holders"][0]["reason"], "same process group; maps nvidia0, nvidia-uvm");
}

// While the creator lives, its inheritor is a latent orphaned context naming it.
TEST_F(TraceIntegration, ALiveCreatorsForkedChildIsALatentOrphanedContext) {
  Strays strays;
  auto [creator, child] = fork_after_init(256 * kMiB, strays);
  ASSERT_GT(child, 0);
  Child monitor = Child::spawn({kContextHelper, "driver-client"}, env_);
  ASSERT_FALSE(ready_line(monitor).is_null());
  for (const char* source : {"bpf", "procfs"}) {
    SCOPED_TRACE(source);
    json doc = trace(1, source);
    const json* latent = finding_about(doc, "latent_orphaned_context", creator.pid());
    ASSERT_NE(latent, nullptr) << doc["findings"].dump(2);
    EXPECT_EQ((*latent)["severity"], "warning");
    EXPECT_EQ(holder_pids(*latent), std::vector<pid_t>{child});
    ASSERT_EQ((*latent)["related"].size(), 1U);
    EXPECT_EQ((*latent)["related"][0]["kind"], "hidden_holder");
    EXPECT_EQ(finding_about(doc, "hidden_holder", child), nullptr);
    EXPECT_EQ((*finding_about(doc, "hidden_holder", monitor.pid()))["severity"], "info");
  }
}

// The binary runs on a node without libbpf or libelf: linked statically.
TEST(TraceBinary, NeedsNeitherLibbpfNorLibelf) {
  auto r = gpureap::testing::run({"/usr/bin/readelf", "--dynamic", kGpureap});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(NEEDED)"), std::string::npos) << r.out;
  for (const char* lib : {"libbpf", "libelf", "libz."}) {
    EXPECT_EQ(r.out.find(lib), std::string::npos) << lib << "\n" << r.out;
  }
}

// trace exits without tearing its snapshot down: an answer that could not be
// written (/dev/full: ENOSPC) still says so, as JSON and as the table, and exits 2.
// A run that names its subcommand builds only that one (src/cli/main.cpp);
// anything else builds them all, so that help and usage errors still list
// every subcommand and the named one still parses its own options.
TEST(TraceBinary, HelpAndUsageErrorsListEverySubcommand) {
  const std::vector<std::string> all = {"trace",   "node", "snapshot", "observe",
                                        "prestop", "lab",  "exporter", "check"};
  const auto top = gpureap::testing::run({kGpureap, "--help"});
  EXPECT_EQ(top.exit_code, 0) << top.err;
  for (const auto& name : all) {
    EXPECT_NE(top.out.find("\n  " + name + " "), std::string::npos) << name << "\n" << top.out;
  }
  const auto typo = gpureap::testing::run({kGpureap, "trce"});
  EXPECT_EQ(typo.exit_code, 2);
  EXPECT_FALSE(typo.err.empty());
  const auto none = gpureap::testing::run({kGpureap});
  EXPECT_NE(none.err.find("A subcommand is required"), std::string::npos) << none.err;
  const auto named = gpureap::testing::run({kGpureap, "trace", "--help"});
  EXPECT_EQ(named.exit_code, 0) << named.err;
  EXPECT_NE(named.out.find("gpureap trace"), std::string::npos) << named.out;
  EXPECT_NE(named.out.find("--json"), std::string::npos) << named.out;
  const auto bad = gpureap::testing::run({kGpureap, "trace", "--no-such-flag"});
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("--no-such-flag"), std::string::npos) << bad.err;
}

TEST(TraceBinary, AnAnswerThatCannotBeWrittenExitsTwo) {
  for (const char* format : {"--json", "--threads=1"}) {
    auto r = gpureap::testing::run(
        {"/bin/sh", "-c", "exec \"$0\" trace --gpu none --fd-source procfs \"$1\" >/dev/full",
         kGpureap, format});
    EXPECT_EQ(r.exit_code, 2) << format << "\n" << r.err;
    EXPECT_NE(r.err.find("cannot write to stdout"), std::string::npos) << format << "\n" << r.err;
  }
}

// --bpf-pin-dir (or GPUREAP_BPF_PIN_DIR): the first run pins its programs on
// the bpffs, the next runs take them; JSON says which in scan.fds_pin.
TEST(TraceBinary, ALaterRunTakesTheProgramsAnEarlierOnePinned) {
  TempDir tmp;
  const std::string bpffs = tmp / "bpffs";
  ASSERT_TRUE(fs::create_directory(bpffs));
  ASSERT_EQ(::mount("bpf", bpffs.c_str(), "bpf", 0, nullptr), 0) << std::strerror(errno);
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }  // frees what was pinned there
  } unmount{bpffs};
  const std::string dir = bpffs + "/gpureap";
  auto fds_pin = [&](const std::vector<std::string>& argv, const std::vector<std::string>& env) {
    auto r = gpureap::testing::run(argv, env);
    EXPECT_TRUE(r.exit_code == 0 || r.exit_code == 1) << r.err;
    const json doc = json::parse(r.out, nullptr, false);
    if (doc.is_discarded() || doc["scan"]["fds_from"] != "bpf")
      return std::string("no BPF scan: ") + r.err;
    return doc["scan"]["fds_pin"].get<std::string>();
  };
  const std::vector<std::string> trace = {kGpureap, "trace",       "--gpu", "none",
                                          "--json", "--fd-source", "bpf"};
  auto with_flag = trace;
  with_flag.insert(with_flag.end(), {"--bpf-pin-dir", dir});
  const std::string first = fds_pin(with_flag, {});
  ASSERT_EQ(first.rfind("pinned " + dir + "/scan-", 0), 0U) << first;
  const std::string entry = first.substr(7);
  EXPECT_EQ(fds_pin(with_flag, {}), "reused " + entry);
  EXPECT_EQ(fds_pin(trace, {"GPUREAP_BPF_PIN_DIR=" + dir}), "reused " + entry);
  EXPECT_EQ(fds_pin(trace, {}), "");  // without one, nothing is pinned or taken
}

TEST_F(TraceIntegration, AZombieCreatorIsStaleAndItsOrphanedContextNamesTheChild) {
  Strays strays;
  auto [creator, child] = fork_after_init(512 * kMiB, strays);
  ASSERT_GT(child, 0);
  const pid_t creator_pid = creator.pid();

  // Killed and left unreaped: the pid stays, a zombie, and the driver (here the
  // simulated one) keeps listing it while the child holds the context.
  ASSERT_EQ(::kill(creator_pid, SIGKILL), 0);
  siginfo_t info{};
  ASSERT_EQ(::waitid(P_PID, static_cast<id_t>(creator_pid), &info, WEXITED | WNOWAIT), 0);
  json doc = trace(1);
  auto ctx = findings_of(doc, "orphaned_context");
  const json* mine = nullptr;
  for (const json* f : ctx) {
    if ((*f)["pid"] == creator_pid) mine = f;
  }
  ASSERT_NE(mine, nullptr) << doc.dump(2);
  EXPECT_NE((*mine)["message"].get<std::string>().find("is a zombie and holds no GPU descriptor"),
            std::string::npos)
      << mine->dump(2);
  bool named = false;
  for (const auto& h : (*mine)["holders"]) named = named || h["pid"].get<pid_t>() == child;
  EXPECT_TRUE(named) << mine->dump(2);
  const json* listing = nullptr;
  for (const auto& d : doc["dead_listed"]) {
    if (d["pid"] == creator_pid) listing = &d;
  }
  ASSERT_NE(listing, nullptr) << doc["dead_listed"].dump();
  EXPECT_EQ((*listing)["pid_match"], "stale");
  EXPECT_EQ((*listing)["pid_now"]["state"], "Z");
  // The zombie is reported as one, and is not shown holding the memory.
  const json* z = find_process(doc, creator_pid);
  ASSERT_NE(z, nullptr);
  EXPECT_FALSE((*z)["listed"].get<bool>());
  EXPECT_TRUE((*z)["gpu_memory"].is_null()) << z->dump();
}

// A replayed driver listing whose PID belongs to a live process holding no GPU
// descriptor: on a node with NVIDIA nodes that is a reused PID, never the owner;
// on one without (nothing could hold a descriptor) it is taken as listed.
TEST_F(TraceIntegration, AListedPidWithoutDescriptorsIsStaleOnlyWhereNodesExist) {
  Child sleeper = Child::spawn({"/bin/sleep", "600"});
  const pid_t pid = sleeper.pid();
  const std::string replay = tmp_ / "gpu.json";
  {
    json snap = {{"driver_version", "580.159.04"},
                 {"devices",
                  {{{"index", 0},
                    {"uuid", "GPU-11111111-2222-3333-4444-555555555555"},
                    {"minor", 0},
                    {"name", "NVIDIA H200"},
                    {"memory", {{"total", 150 * 1024 * kMiB}, {"used", 700 * kMiB}, {"reserved", 0}}},
                    {"processes", {{{"pid", pid}, {"used_memory", 700 * kMiB}}}}}}}};
    std::ofstream(replay) << snap.dump();
  }
  auto run_json = [&]() {
    auto r = gpureap::testing::run(
        {kGpureap, "trace", "--host-root", host_, "--gpu", "json:" + replay, "--json"}, env_);
    auto doc = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.out << r.err;
    return std::make_pair(r.exit_code, doc);
  };

  // No /dev/nvidia* under this host root.
  auto [plain_exit, plain] = run_json();
  EXPECT_TRUE(plain_exit == 0 || plain_exit == 1) << plain_exit;
  const json* p = find_process(plain, pid);
  ASSERT_NE(p, nullptr) << plain.dump(2);
  EXPECT_TRUE((*p)["listed"].get<bool>());
  EXPECT_EQ((*p)["gpu_memory"], 700 * kMiB);

  // The node's /dev gets nvidia0 (195:0): now the sleeper cannot be the owner.
  fs::create_directories(host_ + "/dev");
  ASSERT_EQ(::mknod((host_ + "/dev/nvidia0").c_str(), S_IFCHR | 0600, makedev(195, 0)), 0)
      << std::strerror(errno);
  auto [exit_code, doc] = run_json();
  EXPECT_EQ(exit_code, 1);
  // Shown, as a process a finding names, but not holding the memory.
  const json* now = find_process(doc, pid);
  ASSERT_NE(now, nullptr) << doc.dump(2);
  EXPECT_FALSE((*now)["listed"].get<bool>());
  EXPECT_TRUE((*now)["gpu_memory"].is_null());
  auto ctx = findings_of(doc, "orphaned_context");
  ASSERT_EQ(ctx.size(), 1U) << doc.dump(2);
  EXPECT_EQ((*ctx[0])["pid"], pid);
  EXPECT_NE((*ctx[0])["message"].get<std::string>().find("is now sleep, which holds no GPU descriptor"),
            std::string::npos)
      << ctx[0]->dump(2);
  ASSERT_EQ(doc["dead_listed"].size(), 1U);
  EXPECT_EQ(doc["dead_listed"][0]["pid_match"], "stale");
  EXPECT_EQ(doc["dead_listed"][0]["pid_now"]["comm"], "sleep");
  EXPECT_EQ(doc["summary"]["dead_listed"], 1);

  auto table = gpureap::testing::run({kGpureap, "trace", "--host-root", host_, "--gpu", "json:" + replay}, env_);
  EXPECT_EQ(table.exit_code, 1);
  EXPECT_NE(table.out.find("(pid reused by sleep: orphaned context)"), std::string::npos) << table.out;
}

TEST_F(TraceIntegration, RuncContainerWithZombieAndOrphanIsMappedAndFlagged) {
  ASSERT_TRUE(fs::exists("/usr/sbin/runc") || fs::exists("/usr/bin/runc")) << "runc missing";
  const std::string runc = fs::exists("/usr/sbin/runc") ? "/usr/sbin/runc" : "/usr/bin/runc";
  const std::string uid = gpureap::testing::random_uuid();
  const std::string id = gpureap::testing::random_hex(64);
  const std::string bundle = host_ + "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + id;
  const std::string rootfs = bundle + "/rootfs";
  for (const char* d : {"/proc", "/dev", "/tmp"}) fs::create_directories(rootfs + d);
  fs::create_directories(rootfs + sim_dir_);
  fs::copy_file(kWorker, rootfs + "/gpureap-worker");
  // The worker is static in the default build but dynamic under ASan: give the
  // container the host's /usr read-only, and merged-usr's lib symlinks.
  fs::create_directories(rootfs + "/usr");
  fs::create_directory_symlink("usr/lib", rootfs + "/lib");
  if (fs::exists("/usr/lib64")) fs::create_directory_symlink("usr/lib64", rootfs + "/lib64");

  auto spec_run = gpureap::testing::run({runc, "spec", "--bundle", bundle});
  ASSERT_EQ(spec_run.exit_code, 0) << spec_run.err;
  json spec = json::parse(gpureap::testing::read_file(bundle + "/config.json"));
  spec["process"]["terminal"] = false;
  // PID 1 never reaps: its child becomes a zombie, as under a shell that is not an init.
  spec["process"]["args"] = {"/gpureap-worker", "zombie-maker", "--count", "1"};
  spec["process"]["env"].push_back("GPUREAP_SIM_DIR=" + sim_dir_);
  spec["root"]["readonly"] = true;
  spec["linux"]["cgroupsPath"] = "/kubepods/pod" + uid + "/" + id;  // guaranteed, cgroupfs
  spec["mounts"].push_back({{"destination", "/usr"},
                            {"type", "bind"},
                            {"source", "/usr"},
                            {"options", {"rbind", "ro"}}});
  spec["mounts"].push_back({{"destination", sim_dir_},
                            {"type", "bind"},
                            {"source", sim_dir_},
                            {"options", {"rbind", "rw"}}});
  spec["annotations"] = json::parse(annotations_spec("runc-pod", "lab", uid, "main"))["annotations"];
  gpureap::testing::write_file(bundle + "/config.json", spec.dump(2));

  const std::string state_root = tmp_ / "runc-state";
  // The container's init and the exec'd parent are reparented to this test (a
  // subreaper) when runc exits. A dying namespace init waits until every process
  // of its namespace is reaped, and runc delete waits for the init: so reap any
  // child until the init itself is reaped. (The Child guards below are declared
  // later, so they have reaped their own runc processes before this runs.)
  struct RuncCleanup {
    std::string runc, root, id;
    pid_t init = -1;
    ~RuncCleanup() {
      gpureap::testing::run({runc, "--root", root, "kill", id, "KILL"});
      for (pid_t reaped = 0; init > 0 && reaped != init;) {
        reaped = ::waitpid(-1, nullptr, 0);
        if (reaped < 0 && errno != EINTR) break;
      }
      gpureap::testing::run({runc, "--root", root, "delete", "--force", id});
      while (::waitpid(-1, nullptr, WNOHANG) > 0) {
      }
    }
  } cleanup{runc, state_root, id};

  Child run_c = Child::spawn({runc, "--root", state_root, "run", "--detach", "--bundle", bundle, id});
  json init_ready = ready_line(run_c);
  ASSERT_FALSE(init_ready.is_null()) << "container init did not start";
  const auto state = json::parse(gpureap::testing::run({runc, "--root", state_root, "state", id}).out);
  const auto init_pid = state["pid"].get<pid_t>();
  cleanup.init = init_pid;
  // An exec'd parent starts a GPU worker and exits without waiting: the worker
  // is adopted by the container's PID 1 (the plan's parent.py).
  Child exec_c = Child::spawn({runc, "--root", state_root, "exec", "--detach", id, "/gpureap-worker",
                               "parent", "--exit-after-spawn", "--", "/gpureap-worker", "hold",
                               "--gpu", "sim", "--device", "0", "--bytes",
                               std::to_string(768 * kMiB)});
  json hold_ready;
  for (int i = 0; i < 4 && !hold_ready.contains("bytes"); ++i) hold_ready = ready_line(exec_c);
  ASSERT_TRUE(hold_ready.contains("bytes")) << hold_ready.dump();

  json doc = trace(1);
  const json* orphan_proc = nullptr;
  for (const auto& p : doc["processes"]) {
    if (p["listed"].get<bool>() && p["pod"].is_object() && p["pod"]["name"] == "runc-pod") {
      orphan_proc = &p;
    }
  }
  ASSERT_NE(orphan_proc, nullptr) << doc.dump(2);
  EXPECT_EQ((*orphan_proc)["ppid"], init_pid);
  EXPECT_NE((*orphan_proc)["ns_pid"], (*orphan_proc)["pid"]);  // container-local PID shown
  EXPECT_EQ((*orphan_proc)["pod"]["qos"], "guaranteed");
  EXPECT_EQ((*orphan_proc)["pod"]["namespace"], "lab");
  EXPECT_EQ((*orphan_proc)["container"]["name"], "main");
  EXPECT_EQ((*orphan_proc)["gpu_memory"], 768 * kMiB);

  bool orphan_found = false;
  for (const auto* f : findings_of(doc, "orphan")) {
    orphan_found = orphan_found || (*f)["pid"] == (*orphan_proc)["pid"];
  }
  EXPECT_TRUE(orphan_found) << doc["findings"].dump(2);

  bool zombie_found = false;
  for (const auto* f : findings_of(doc, "zombie")) {
    const json* z = find_process(doc, (*f)["pid"].get<pid_t>());
    if (z != nullptr && (*z)["ppid"] == init_pid && (*z)["pod"]["name"] == "runc-pod") {
      zombie_found = true;
    }
  }
  EXPECT_TRUE(zombie_found) << doc["findings"].dump(2);
}

}  // namespace
