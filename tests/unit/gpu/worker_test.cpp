// gpureap-worker run as a binary: every mode's ready line, its effect on the
// sim device and its signal behaviour. Waits on the ready line, never sleeps.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "gpu/sim_backend.hpp"
#include "test_util.hpp"

namespace gpureap::gpu {
namespace {

using nlohmann::json;

constexpr std::uint64_t kMiB = sim::kMiB;

// Fields of /proc/<pid>/stat after the comm: state, ppid, pgrp, session.
struct StatFields {
  char state = '?';
  long ppid = 0;
  long pgrp = 0;
  long session = 0;
};
StatFields proc_stat(pid_t pid) {
  const std::string text = testing::read_text("/proc/" + std::to_string(pid) + "/stat");
  StatFields f;
  auto close = text.rfind(')');
  if (close == std::string::npos) return f;
  std::istringstream rest(text.substr(close + 2));
  rest >> f.state >> f.ppid >> f.pgrp >> f.session;
  return f;
}

std::string status_line(pid_t pid, const std::string& key) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return line.substr(key.size() + 1);
  }
  return {};
}

class GpuWorker : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::become_subreaper();
    dir_ = tmp_.path() + "/sim";
    auto root = sys::HostRoot::open("/");
    ASSERT_TRUE(root.ok());
    backend_ = make_sim_backend(*root, SimOptions{dir_});
  }

  // Starts the worker with stdout on a pipe (stderr goes to the test log).
  pid_t start(std::vector<std::string> args) {
    args.insert(args.begin(), GPUREAP_WORKER);
    pipe_ = std::make_unique<testing::Pipe>();
    pid_t pid = ::fork();
    if (pid == 0) {
      ::dup2(pipe_->w(), STDOUT_FILENO);
      ::setenv("GPUREAP_SIM_DIR", dir_.c_str(), 1);
      std::vector<char*> argv;
      for (auto& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    kids_.add(pid);
    pipe_->close_write();
    buffer_.clear();
    return pid;
  }

  json line() {
    auto l = testing::read_line(pipe_->r(), buffer_);
    EXPECT_TRUE(l) << "no ready line from the worker";
    if (!l) return json();
    json j = json::parse(*l, nullptr, false);
    EXPECT_FALSE(j.is_discarded()) << *l;
    return j;
  }

  std::vector<GpuProcess> procs(unsigned device = 0) {
    auto s = backend_->snapshot();
    EXPECT_TRUE(s.ok());
    if (!s.ok() || s->devices.size() <= device) return {};
    return s->devices[device].processes;
  }

  // Exit status of a finished run (stdout drained into the buffer).
  int finish(pid_t pid) {
    std::string rest;
    while (testing::read_line(pipe_->r(), buffer_)) {
    }
    return kids_.reap(pid);
  }

  testing::TempDir tmp_;
  std::string dir_;
  std::unique_ptr<GpuBackend> backend_;
  std::unique_ptr<testing::Pipe> pipe_;
  std::string buffer_;
  testing::Children kids_;
};

TEST_F(GpuWorker, HelpListsModes) {
  pid_t pid = start({"--help"});
  std::string all;
  while (auto l = testing::read_line(pipe_->r(), buffer_)) all += *l + "\n";
  int status = kids_.reap(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  for (const char* mode : {"hold", "fork-after-init", "parent", "zombie-maker", "spawn-tree", "init-sim",
                           "--ignore-term", "--term-cleanup", "--exit-after-spawn"}) {
    EXPECT_NE(all.find(mode), std::string::npos) << mode;
  }
}

TEST_F(GpuWorker, UsageErrorsExit64) {
  for (std::vector<std::string> args : std::vector<std::vector<std::string>>{
           {}, {"nonsense"}, {"hold", "--gpu", "opencl"}, {"hold", "--bytes", "12Q"}, {"hold", "--device"},
           {"hold", "--ignore-term", "--term-cleanup"}, {"parent"}}) {
    pid_t pid = start(args);
    int status = finish(pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 64) << (args.empty() ? "" : args[0]);
  }
}

TEST_F(GpuWorker, HoldSimDefaultTermKillsAndReleases) {
  pid_t pid = start({"hold", "--gpu", "sim", "--device", "0", "--bytes", "1G"});
  json j = line();
  EXPECT_EQ(j["mode"], "hold");
  EXPECT_EQ(j["pid"], pid);
  EXPECT_EQ(j["bytes"], 1024 * kMiB);
  EXPECT_EQ(j["sigterm"], "default");
  ASSERT_EQ(procs(), (std::vector<GpuProcess>{{static_cast<std::uint32_t>(pid), 1024 * kMiB}}));
  int status = kids_.kill_and_reap(pid, SIGTERM);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGTERM);
  EXPECT_TRUE(procs().empty());
}

TEST_F(GpuWorker, HoldIgnoreTermSurvivesSigterm) {
  pid_t pid = start({"hold", "--bytes", "16M", "--ignore-term"});
  EXPECT_EQ(line()["sigterm"], "ignore");
  // SigIgn bit 15 (SIGTERM) = 0x4000.
  EXPECT_NE(std::strtoull(status_line(pid, "SigIgn").c_str(), nullptr, 16) & 0x4000ULL, 0ULL);
  ::kill(pid, SIGTERM);  // an ignored signal is dropped at send time
  EXPECT_EQ(procs().size(), 1U);
  int status = kids_.kill_and_reap(pid, SIGKILL);
  ASSERT_TRUE(WIFSIGNALED(status));
  EXPECT_EQ(WTERMSIG(status), SIGKILL);  // it was SIGKILL, not SIGTERM, that ended it
}

TEST_F(GpuWorker, HoldTermCleanupReleasesAndExitsZero) {
  pid_t pid = start({"hold", "--bytes", "16M", "--term-cleanup"});
  json j = line();
  EXPECT_EQ(j["sigterm"], "cleanup");
  const std::string ctx = j["context"].get<std::string>();
  EXPECT_EQ(procs().size(), 1U);
  int status = kids_.kill_and_reap(pid, SIGTERM);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_NE(::access(ctx.c_str(), F_OK), 0);  // the context file is gone, not just unheld
  EXPECT_TRUE(procs().empty());
}

TEST_F(GpuWorker, HoldCudaExits2WithoutLibcudaAndHoldsWithIt) {
  // The test machines have no NVIDIA driver; a GPU machine has one. Either way
  // the worker must do what the environment allows, and say so.
  void* libcuda = ::dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  const bool have_cuda = libcuda != nullptr;
  if (libcuda != nullptr) ::dlclose(libcuda);
  pid_t pid = start({"hold", "--gpu", "cuda", "--bytes", "1M"});
  auto l = testing::read_line(pipe_->r(), buffer_);
  if (have_cuda) {
    ASSERT_TRUE(l) << "libcuda.so.1 loads here, so the worker must hold a real context";
    EXPECT_NE(l->find("\"gpu\":\"cuda\""), std::string::npos) << *l;
    return;  // the fixture's guard kills and reaps it
  }
  // No ready line: the one line is the error event, naming the library.
  ASSERT_TRUE(l);
  EXPECT_NE(l->find("\"event\":\"error\""), std::string::npos) << *l;
  EXPECT_NE(l->find("libcuda.so.1"), std::string::npos) << *l;
  EXPECT_FALSE(testing::read_line(pipe_->r(), buffer_));
  int status = kids_.reap(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 2);
}

TEST_F(GpuWorker, ForkAfterInitOrphansTheContext) {
  pid_t pid = start({"fork-after-init", "--gpu", "sim", "--device", "1", "--sim-devices", "2", "--bytes", "2G"});
  json j = line();
  EXPECT_EQ(j["mode"], "fork-after-init");
  EXPECT_EQ(j["pid"], pid);
  const pid_t child = j["child"].get<pid_t>();
  kids_.add(child);
  EXPECT_EQ(proc_stat(child).ppid, pid);
  ASSERT_EQ(procs(1).size(), 1U);
  kids_.kill_and_reap(pid);
  // The parent is dead; its pid is still listed, held by the child.
  EXPECT_EQ(procs(1), (std::vector<GpuProcess>{{static_cast<std::uint32_t>(pid), 2048 * kMiB}}));
  kids_.kill_and_reap(child);
  EXPECT_TRUE(procs(1).empty());
}

TEST_F(GpuWorker, ParentExitAfterSpawnLeavesOrphan) {
  pid_t pid = start({"parent", "--exit-after-spawn", "--", GPUREAP_WORKER, "hold", "--bytes", "8M"});
  // Two lines, in either order: the parent's and the child's.
  json a = line();
  json b = line();
  json parent = a["mode"] == "parent" ? a : b;
  json hold = a["mode"] == "parent" ? b : a;
  EXPECT_EQ(parent["pid"], pid);
  ASSERT_EQ(hold["mode"], "hold");
  const pid_t child = hold["pid"].get<pid_t>();
  EXPECT_EQ(parent["child"], child);
  kids_.add(child);
  int status = kids_.reap(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(proc_stat(child).ppid, ::getpid());  // reparented to us (subreaper)
  EXPECT_EQ(procs().size(), 1U);
}

TEST_F(GpuWorker, ParentExecFailureExits127) {
  pid_t pid = start({"parent", "--", "/nonexistent/program"});
  int status = finish(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 127);
}

TEST_F(GpuWorker, ParentWaitsAndPassesStatus) {
  pid_t pid = start({"parent", "--", "/bin/sh", "-c", "exit 3"});
  int status = finish(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3);
}

TEST_F(GpuWorker, ZombieMakerLeavesUnreapedChildren) {
  pid_t pid = start({"zombie-maker", "--count", "3"});
  json j = line();
  ASSERT_EQ(j["zombies"].size(), 3U);
  for (const auto& z : j["zombies"]) {
    const pid_t zp = z.get<pid_t>();
    kids_.add(zp);  // become ours once the maker dies
    StatFields f = proc_stat(zp);
    EXPECT_EQ(f.state, 'Z');
    EXPECT_EQ(f.ppid, pid);
  }
  kids_.kill_and_reap(pid);
}

TEST_F(GpuWorker, SpawnTreeSetsid) {
  pid_t pid = start({"spawn-tree", "--children", "2", "--setsid"});
  json j = line();
  ASSERT_EQ(j["children"].size(), 2U);
  for (const auto& c : j["children"]) {
    const pid_t cp = c.get<pid_t>();
    kids_.add(cp);
    StatFields f = proc_stat(cp);
    EXPECT_EQ(f.ppid, pid);
    EXPECT_EQ(f.session, cp);  // its own session: escaped the caller's
    EXPECT_EQ(f.pgrp, cp);
  }
}

TEST_F(GpuWorker, InitSim) {
  pid_t pid = start({"init-sim", "--devices", "4"});
  json j = line();
  EXPECT_EQ(j["sim_dir"], dir_);
  EXPECT_EQ(WEXITSTATUS(finish(pid)), 0);
  auto s = backend_->snapshot();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->devices.size(), 4U);
}

TEST_F(GpuWorker, HoldOnMissingSimDeviceFails) {
  pid_t pid = start({"hold", "--device", "3"});  // initialises 1 device
  int status = finish(pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

}  // namespace
}  // namespace gpureap::gpu
