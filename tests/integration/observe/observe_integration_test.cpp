// gpureap observe run INSIDE real PID namespaces (`unshare --pid --fork
// --mount-proc`, so /proc is the namespace's and every PID is local), against
// real processes and the simulated GPU, or a replayed GPU snapshot that lists a
// worker under its host PID (the driver-590/PyTorch case that made the plan's
// script call live workers orphaned).
//
// Each namespace's PID 1 is started by the test; more processes are put into it
// with `nsenter`. The test binary is a child subreaper, kills by pidfd only what
// it started (directly or indirectly), and synchronises on ready lines.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "sys/pidfd.hpp"
#include "test_support.hpp"

namespace {

using gpureap::testing::Child;
using gpureap::testing::TempDir;
using nlohmann::json;
namespace fs = std::filesystem;

const std::string kGpureap = GPUREAP_BIN;
const std::string kWorker = GPUREAP_WORKER_BIN;
const std::string kInit = GPUREAP_INIT_BIN;
const std::string kUnshare = "/usr/bin/unshare";
const std::string kNsenter = "/usr/bin/nsenter";
constexpr std::uint64_t kMiB = 1024ULL * 1024ULL;

// Kills, by pidfd, processes the test made indirectly and reaps what was
// reparented to the test (a child subreaper; only our descendants can be).
class Strays {
 public:
  void add(pid_t pid) {
    auto fd = gpureap::sys::pidfd_open(pid);
    if (fd) fds_.push_back(std::move(fd.value()));
  }
  void kill_all() {
    for (auto& fd : fds_) {
      if (gpureap::sys::pidfd_send_signal(fd.get(), SIGKILL)) {
        (void)gpureap::sys::pidfd_wait_exit(fd.get(), 10000);
      }
    }
    fds_.clear();
    while (::waitpid(-1, nullptr, WNOHANG) > 0) {
    }
  }
  ~Strays() { kill_all(); }
  Strays() = default;
  Strays(const Strays&) = delete;
  Strays& operator=(const Strays&) = delete;

 private:
  std::vector<gpureap::sys::UniqueFd> fds_;
};

json parse_line(const std::optional<std::string>& line) {
  if (!line) return json();
  return json::parse(*line, nullptr, false);
}

// The host PID of the only child of `parent` (unshare's or nsenter's forked workload).
pid_t only_child(pid_t parent) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::string status;
    try {
      status = gpureap::testing::read_file(entry.path().string() + "/status");
    } catch (...) {
      continue;  // vanished
    }
    const auto at = status.find("\nPPid:\t");
    if (at != std::string::npos && std::stol(status.substr(at + 7)) == parent) {
      return static_cast<pid_t>(std::stol(name));
    }
  }
  return -1;
}

// A PID namespace with its own /proc whose PID 1 runs `argv`; it prints a ready
// line. Destruction kills PID 1, which takes the whole namespace down.
class Namespace {
 public:
  Namespace(const std::vector<std::string>& argv, const std::vector<std::string>& env, Strays& strays) {
    std::vector<std::string> full = {kUnshare, "--pid", "--fork", "--mount-proc", "--kill-child"};
    full.insert(full.end(), argv.begin(), argv.end());
    unshare_ = Child::spawn(full, env);
    ready_ = parse_line(unshare_.read_line());
    init_ = only_child(unshare_.pid());
    if (init_ > 0) strays.add(init_);
  }
  [[nodiscard]] const json& ready() const { return ready_; }
  [[nodiscard]] pid_t init_host_pid() const { return init_; }
  [[nodiscard]] std::vector<std::string> enter(const std::vector<std::string>& argv) const {
    std::vector<std::string> full = {kNsenter, "--target", std::to_string(init_), "--pid", "--mount", "--"};
    full.insert(full.end(), argv.begin(), argv.end());
    return full;
  }

 private:
  Child unshare_;
  json ready_;
  pid_t init_ = -1;
};

std::vector<const json*> findings_of(const json& doc, const std::string& kind) {
  std::vector<const json*> out;
  for (const auto& f : doc["findings"]) {
    if (f["kind"] == kind) out.push_back(&f);
  }
  return out;
}

const json* process_named(const json& doc, pid_t pid) {
  for (const auto& p : doc["processes"]) {
    if (p["pid"].get<pid_t>() == pid) return &p;
  }
  return nullptr;
}

class ObserveIntegration : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "needs root (PID and mount namespaces)";
    ASSERT_EQ(::prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    ASSERT_TRUE(fs::exists(kUnshare) && fs::exists(kNsenter)) << "util-linux unshare/nsenter missing";
    sim_dir_ = tmp_ / "sim";
    env_ = {"GPUREAP_SIM_DIR=" + sim_dir_};
    auto init = gpureap::testing::run({kWorker, "init-sim", "--devices", "2"}, env_);
    ASSERT_EQ(init.exit_code, 0) << init.err;
  }

  // gpureap observe run inside `ns`; checks the exit code and parses the JSON.
  json observe(const Namespace& ns, const std::string& gpu, int expected_exit,
               const std::vector<std::string>& env) {
    auto r = gpureap::testing::run(ns.enter({kGpureap, "observe", "--gpu", gpu, "--json"}), env);
    EXPECT_EQ(r.exit_code, expected_exit) << r.out << r.err;
    auto doc = json::parse(r.out, nullptr, false);
    EXPECT_FALSE(doc.is_discarded()) << r.out << r.err;
    if (doc.is_discarded()) return json::object();
    EXPECT_EQ(doc["schema"], 1);
    return doc;
  }
  json observe(const Namespace& ns, int expected_exit) { return observe(ns, "sim", expected_exit, env_); }

  TempDir tmp_;
  std::string sim_dir_;
  std::vector<std::string> env_;
};

// (a) Driver-580-like: inside the namespace the sim device lists the worker by
// its local PID (1): alive, nothing orphaned, exit 0.
TEST_F(ObserveIntegration, WorkerHoldingTheGpuInsideTheNamespaceIsAlive) {
  Strays strays;
  Namespace ns({kWorker, "hold", "--gpu", "sim", "--device", "0", "--bytes", std::to_string(512 * kMiB)},
               env_, strays);
  ASSERT_EQ(ns.ready()["pid"], 1) << ns.ready().dump();
  ASSERT_GT(ns.init_host_pid(), 0);

  json doc = observe(ns, 0);
  EXPECT_EQ(doc["pid1"]["pid"], 1);
  EXPECT_EQ(doc["pid1"]["comm"], "gpureap-worker");
  EXPECT_EQ(doc["pid1"]["is_init"], false);
  ASSERT_EQ(doc["listed"].size(), 1U) << doc.dump(2);
  EXPECT_EQ(doc["listed"][0]["pid"], 1);
  EXPECT_EQ(doc["listed"][0]["status"], "alive");
  EXPECT_EQ(doc["listed"][0]["used_memory"], 512 * kMiB);
  EXPECT_EQ(doc["orphaned_context"]["dead"], 0);
  EXPECT_EQ(doc["orphaned_context"]["driver_pid_view"], "local");
  EXPECT_TRUE(findings_of(doc, "orphaned_context").empty());
  ASSERT_EQ(doc["holders"].size(), 1U);
  EXPECT_EQ(doc["holders"][0]["pid"], 1);
  // Every PID in the report is local: the host PID of the worker is nowhere.
  EXPECT_EQ(process_named(doc, ns.init_host_pid()), nullptr);

  // The human report: the plan's eight sections, no false alarm.
  auto text = gpureap::testing::run(ns.enter({kGpureap, "observe", "--gpu", "sim"}), env_);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  for (const char* s : {"[1] PID 1", "[2] Process tree", "[3] Zombies", "[4] Orphans", "[5] GPU memory",
                        "[6] Driver-listed", "[7] Processes holding", "[8] Orphaned-context summary",
                        "PID 1 is gpureap-worker, not an init"}) {
    EXPECT_NE(text.out.find(s), std::string::npos) << s << "\n" << text.out;
  }
  EXPECT_EQ(text.out.find("ORPHANED"), std::string::npos) << text.out;
}

// An init as PID 1 is recognised.
TEST_F(ObserveIntegration, GpureapInitAsPid1IsAnInit) {
  Strays strays;
  Namespace ns({kInit, "--", kWorker, "hold", "--gpu", "sim", "--device", "1", "--bytes",
                std::to_string(64 * kMiB)},
               env_, strays);
  ASSERT_FALSE(ns.ready().is_null());
  json doc = observe(ns, 0);
  EXPECT_EQ(doc["pid1"]["is_init"], true) << doc["pid1"].dump();
  EXPECT_EQ(doc["pid1"]["init"], "gpureap-init");
  ASSERT_EQ(doc["listed"].size(), 1U);
  EXPECT_EQ(doc["listed"][0]["status"], "alive");
  EXPECT_TRUE(findings_of(doc, "pid1_not_init").empty());
}

// (b) Driver-590/PyTorch-like: a replayed GPU snapshot lists the worker under its
// HOST PID, which does not exist inside the namespace, while the worker holds
// /dev/nvidia0 there. Never an orphaned context: not_visible, host PIDs.
TEST_F(ObserveIntegration, HostPidListingOfALiveWorkerIsNotVisibleNotOrphaned) {
  // A sim device whose node files are the namespace's /dev/nvidia*: the worker's
  // descriptors then read "/dev/nvidia0", as a real one's do. /dev is a tmpfs
  // mounted in the namespace's private mount namespace only.
  const std::string sim = tmp_ / "sim-devnodes";
  const std::vector<std::string> env = {"GPUREAP_SIM_DIR=" + sim};
  auto init = gpureap::testing::run({kWorker, "init-sim", "--devices", "1"}, env);
  ASSERT_EQ(init.exit_code, 0) << init.err;
  fs::remove_all(sim + "/dev");
  fs::create_directory_symlink("/dev", sim + "/dev");

  Strays strays;
  const std::string script =
      "mount -t tmpfs gpureap-observe-dev /dev && : > /dev/nvidia0 && : > /dev/nvidiactl && "
      ": > /dev/nvidia-uvm && exec \"$0\" hold --gpu sim --device 0 --bytes " +
      std::to_string(1024 * kMiB);
  Namespace ns({"/bin/sh", "-c", script, kWorker}, env, strays);
  ASSERT_EQ(ns.ready()["pid"], 1) << ns.ready().dump();
  const pid_t host_pid = ns.init_host_pid();
  ASSERT_GT(host_pid, 1);

  const std::string replay = tmp_ / "gpu-host-pids.json";
  gpureap::testing::write_file(
      replay, json({{"driver_version", "590.48.01"},
                    {"devices",
                     {{{"index", 0},
                       {"uuid", "GPU-00000000-0000-0000-0000-000000000590"},
                       {"minor", 0},
                       {"name", "NVIDIA H200"},
                       {"memory", {{"total", 141ULL << 30}, {"used", 1024 * kMiB}, {"reserved", 0}}},
                       {"processes", {{{"pid", host_pid}, {"used_memory", 1024 * kMiB}}}}}}}})
                  .dump());

  json doc = observe(ns, "json:" + replay, 0, env);
  ASSERT_EQ(doc["listed"].size(), 1U) << doc.dump(2);
  EXPECT_EQ(doc["listed"][0]["pid"], host_pid);
  EXPECT_EQ(doc["listed"][0]["status"], "not_visible") << doc["listed"][0].dump();
  EXPECT_EQ(doc["orphaned_context"]["dead"], 0);
  EXPECT_EQ(doc["orphaned_context"]["not_visible"], 1);
  EXPECT_EQ(doc["orphaned_context"]["driver_pid_view"], "host");
  EXPECT_EQ(doc["orphaned_context"]["unlisted_holders"], json::array({1}));
  EXPECT_TRUE(findings_of(doc, "orphaned_context").empty()) << doc["findings"].dump(2);
  auto host = findings_of(doc, "driver_host_pids");
  ASSERT_EQ(host.size(), 1U) << doc["findings"].dump(2);
  EXPECT_NE((*host[0])["message"].get<std::string>().find("host PIDs"), std::string::npos);

  auto text = gpureap::testing::run(ns.enter({kGpureap, "observe", "--gpu", "json:" + replay}), env);
  EXPECT_EQ(text.exit_code, 0) << text.err;
  EXPECT_EQ(text.out.find("ORPHANED"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("driver reports PIDs outside this PID namespace (host PIDs): 1 listed, 1 local "
                          "holders unlisted"),
            std::string::npos)
      << text.out;
}

// (c) The plan's scenario 1: a PID 1 that is not an init and never reaps (bash
// in the plan), a zombie under it, and an orphan: a parent that spawned a GPU
// worker and exited, so the worker was reparented to PID 1.
TEST_F(ObserveIntegration, NonInitPid1WithAZombieAndAnOrphan) {
  Strays strays;
  Namespace ns({kWorker, "zombie-maker", "--count", "1"}, env_, strays);
  ASSERT_FALSE(ns.ready().is_null());

  // setsid: the parent leads its own session (as an exec'd shell would), so its
  // worker keeps a session whose leader is gone once the parent exits.
  Child parent = Child::spawn(ns.enter({"/usr/bin/setsid", "--wait", kWorker, "parent", "--exit-after-spawn", "--", kWorker, "hold", "--gpu",
                                        "sim", "--device", "0", "--bytes", std::to_string(256 * kMiB)}),
                              env_);
  // Two ready lines (the parent's and the worker's), in either order.
  std::optional<pid_t> worker_local;
  for (int i = 0; i < 2; ++i) {
    json line = parse_line(parent.read_line());
    ASSERT_FALSE(line.is_null()) << "a ready line is missing";
    if (line["mode"] == "hold") worker_local = line["pid"].get<pid_t>();
    if (line["mode"] == "parent") {
      // Its host PID: the only child of nsenter; the worker's host PID is not
      // needed: PID 1's death takes it down.
    }
  }
  ASSERT_TRUE(worker_local);
  // nsenter exits after the parent did: by then the worker has been reparented.
  const int status = parent.wait_exit();
  ASSERT_TRUE(WIFEXITED(status)) << status;

  json doc = observe(ns, 1);
  EXPECT_EQ(doc["pid1"]["is_init"], false);
  auto pid1 = findings_of(doc, "pid1_not_init");
  ASSERT_EQ(pid1.size(), 1U) << doc["findings"].dump(2);
  EXPECT_EQ((*pid1[0])["severity"], "warning");
  EXPECT_NE((*pid1[0])["message"].get<std::string>().find("PID 1 is gpureap-worker, not an init"),
            std::string::npos);
  ASSERT_EQ(doc["zombies"].size(), 1U) << doc.dump(2);
  EXPECT_EQ(doc["zombies"][0]["ppid"], 1);
  EXPECT_EQ(findings_of(doc, "zombie").size(), 1U);
  bool orphan_found = false;
  for (const auto& o : doc["orphans"]) {
    if (o["pid"] == *worker_local) {
      orphan_found = true;
      EXPECT_EQ(o["adopted"], true) << o.dump();
    }
  }
  EXPECT_TRUE(orphan_found) << doc["orphans"].dump(2);
  auto orphans = findings_of(doc, "orphan");
  ASSERT_EQ(orphans.size(), 1U) << doc["findings"].dump(2);
  EXPECT_EQ((*orphans[0])["pid"], *worker_local);
  // The orphan's GPU context is alive and listed by its local PID.
  ASSERT_EQ(doc["listed"].size(), 1U);
  EXPECT_EQ(doc["listed"][0]["pid"], *worker_local);
  EXPECT_EQ(doc["listed"][0]["status"], "alive");
}

// (d) Fork after init inside the namespace, creator killed: the child keeps the
// context; the driver keeps listing the dead creator's local PID. PID 1 holds the
// same GPU and is listed by its local PID, so the driver demonstrably speaks this
// namespace's PIDs: a real orphaned context, naming the child.
TEST_F(ObserveIntegration, ForkInheritedContextWhoseCreatorDiedNamesTheChild) {
  Strays strays;
  Namespace ns({kWorker, "hold", "--gpu", "sim", "--device", "0", "--bytes", std::to_string(128 * kMiB)}, env_,
               strays);
  ASSERT_EQ(ns.ready()["pid"], 1);

  Child creator = Child::spawn(ns.enter({kWorker, "fork-after-init", "--gpu", "sim", "--device", "0", "--bytes",
                                         std::to_string(1024 * kMiB)}),
                               env_);
  json ready = parse_line(creator.read_line());
  ASSERT_TRUE(ready.contains("child")) << ready.dump();
  const auto creator_local = ready["pid"].get<pid_t>();
  const auto child_local = ready["child"].get<pid_t>();
  const pid_t creator_host = only_child(creator.pid());
  ASSERT_GT(creator_host, 0);
  strays.add(creator_host);

  // While the creator lives: both listed, alive; the forked child holds the GPU
  // unlisted (a hidden holder: exit 1), and nothing is orphaned.
  json before = observe(ns, 1);
  ASSERT_EQ(before["listed"].size(), 2U) << before.dump(2);
  for (const auto& l : before["listed"]) EXPECT_EQ(l["status"], "alive") << l.dump();
  EXPECT_TRUE(findings_of(before, "orphaned_context").empty());
  EXPECT_EQ(before["orphaned_context"]["unlisted_holders"], json::array({child_local}));

  // Kill the creator (we started it, through nsenter); nsenter reaps it and exits.
  auto fd = gpureap::sys::pidfd_open(creator_host);
  ASSERT_TRUE(fd);
  ASSERT_TRUE(gpureap::sys::pidfd_send_signal(fd->get(), SIGKILL));
  (void)creator.wait_exit();

  json doc = observe(ns, 1);
  const json* dead = nullptr;
  for (const auto& l : doc["listed"]) {
    if (l["pid"] == creator_local) dead = &l;
  }
  ASSERT_NE(dead, nullptr) << doc.dump(2);
  EXPECT_EQ((*dead)["status"], "dead") << dead->dump();
  EXPECT_EQ((*dead)["used_memory"], 1024 * kMiB);
  EXPECT_EQ(doc["orphaned_context"]["dead"], 1);
  EXPECT_EQ(doc["orphaned_context"]["not_visible"], 0);
  auto ctx = findings_of(doc, "orphaned_context");
  ASSERT_EQ(ctx.size(), 1U) << doc["findings"].dump(2);
  EXPECT_EQ((*ctx[0])["pid"], creator_local);
  EXPECT_EQ((*ctx[0])["severity"], "critical");
  bool named = false;
  for (const auto& h : (*ctx[0])["holders"]) named = named || h["pid"] == child_local;
  EXPECT_TRUE(named) << ctx[0]->dump(2);
  EXPECT_NE((*ctx[0])["message"].get<std::string>().find("judged from inside the container"), std::string::npos);
}

}  // namespace
