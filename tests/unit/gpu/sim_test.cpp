// The simulated GPU with REAL processes: contexts held by forked children,
// inherited by grandchildren, killed, left as zombies. Synchronised with pipes;
// every child is killed and reaped by a guard even when an assertion fails.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "gpu/sim_backend.hpp"
#include "gpu/sim_client.hpp"
#include "test_util.hpp"

namespace gpureap::gpu {
namespace {

constexpr std::uint64_t kMiB = sim::kMiB;

[[noreturn]] void pause_forever() {
  sigset_t none;
  sigemptyset(&none);
  for (;;) ::sigsuspend(&none);
}

char proc_state(pid_t pid) {
  const std::string text = testing::read_text("/proc/" + std::to_string(pid) + "/stat");
  auto close = text.rfind(')');
  return close == std::string::npos || close + 2 >= text.size() ? '?' : text[close + 2];
}

// Unsets an environment variable for one test and restores it after.
class ScopedUnsetEnv {
 public:
  explicit ScopedUnsetEnv(const char* name) : name_(name) {
    if (const char* v = std::getenv(name)) saved_ = v;
    ::unsetenv(name);
  }
  ~ScopedUnsetEnv() {
    if (saved_) ::setenv(name_, saved_->c_str(), 1);
  }
  ScopedUnsetEnv(const ScopedUnsetEnv&) = delete;
  ScopedUnsetEnv& operator=(const ScopedUnsetEnv&) = delete;

 private:
  const char* name_;
  std::optional<std::string> saved_;
};

class GpuSim : public ::testing::Test {
 protected:
  void SetUp() override {
    testing::become_subreaper();
    dir_ = tmp_.path() + "/sim";
    ASSERT_TRUE(sim::init_sim_dir(dir_, sim::default_config(2)).ok());
    auto root = sys::HostRoot::open("/");
    ASSERT_TRUE(root.ok());
    backend_ = make_sim_backend(*root, SimOptions{dir_});
  }

  GpuSnapshot snap() {
    auto s = backend_->snapshot();
    EXPECT_TRUE(s.ok()) << s.error().message;
    return s.ok() ? *s : GpuSnapshot{};
  }

  // A child that creates a context, reports 1 (or 0 on failure) and pauses.
  pid_t spawn_holder(unsigned device, std::uint64_t bytes) {
    testing::Pipe ready;
    pid_t pid = ::fork();
    if (pid == 0) {
      auto ctx = sim::create_context(dir_, device, bytes);
      testing::write_value<int>(ready.w(), ctx.ok() ? 1 : 0);
      pause_forever();
    }
    kids_.add(pid);
    ready.close_write();
    auto ok = testing::read_value<int>(ready.r());
    EXPECT_EQ(ok, 1);
    return pid;
  }

  testing::TempDir tmp_;
  std::string dir_;
  std::unique_ptr<GpuBackend> backend_;
  testing::Children kids_;  // declared last: destroyed (children killed) first
};

// Found by the lab: a concurrent snapshot opens context files to read their
// byte count. A process holding a context file without its device file is such
// a reader, not a holder: the creator's death still releases the context.
TEST_F(GpuSim, AReaderOfTheContextFileHoldsNoContext) {
  testing::Pipe ready;
  testing::Pipe go;
  pid_t creator = ::fork();
  if (creator == 0) {
    auto ctx = sim::create_context(dir_, 0, 256 * kMiB);
    testing::write_value<int>(ready.w(), ctx.ok() ? 1 : 0);
    pause_forever();
  }
  kids_.add(creator);
  ready.close_write();
  ASSERT_EQ(testing::read_value<int>(ready.r()), 1);
  const std::string ctx_file = dir_ + "/ctx/" + sim::context_name({0, creator, 0});
  testing::Pipe opened;
  pid_t reader = ::fork();
  if (reader == 0) {
    const int fd = ::open(ctx_file.c_str(), O_RDONLY);
    testing::write_value<int>(opened.w(), fd >= 0 ? 1 : 0);
    pause_forever();
  }
  kids_.add(reader);
  opened.close_write();
  ASSERT_EQ(testing::read_value<int>(opened.r()), 1);
  EXPECT_EQ(snap().devices[0].memory->used, 256 * kMiB);  // the creator holds it
  kids_.kill_and_reap(creator);
  const auto after = snap();
  EXPECT_EQ(after.devices[0].memory->used, 0U);  // the reader does not
  EXPECT_TRUE(after.devices[0].processes.empty());
}

TEST_F(GpuSim, ListsDevicesFromConfig) {
  auto s = snap();
  EXPECT_EQ(s.driver_version, "sim-580.159.04");
  ASSERT_EQ(s.devices.size(), 2U);
  for (unsigned i = 0; i < 2; ++i) {
    const auto& d = s.devices[i];
    EXPECT_EQ(d.index, i);
    EXPECT_EQ(d.minor, i);
    EXPECT_EQ(d.name, "Simulated H200");
    EXPECT_EQ(d.uuid.rfind("GPU-", 0), 0U);
    ASSERT_TRUE(d.memory);
    EXPECT_EQ(d.memory->total, 143771 * kMiB);
    EXPECT_EQ(d.memory->reserved, 615 * kMiB);
    EXPECT_EQ(d.memory->used, 0U);
    EXPECT_TRUE(d.processes.empty());
  }
  EXPECT_NE(s.devices[0].uuid, s.devices[1].uuid);
  EXPECT_EQ(backend_->unavailable_reason(), "");
}

TEST_F(GpuSim, HeldWhileCreatorLivesReleasedWhenKilled) {
  pid_t child = spawn_holder(1, 512 * kMiB);
  auto s = snap();
  ASSERT_EQ(s.devices.size(), 2U);
  EXPECT_TRUE(s.devices[0].processes.empty());
  ASSERT_EQ(s.devices[1].processes.size(), 1U);
  EXPECT_EQ(s.devices[1].processes[0], (GpuProcess{static_cast<std::uint32_t>(child), 512 * kMiB}));
  EXPECT_EQ(s.devices[1].memory->used, 512 * kMiB);

  kids_.kill_and_reap(child);
  s = snap();
  EXPECT_TRUE(s.devices[1].processes.empty());
  EXPECT_EQ(s.devices[1].memory->used, 0U);
}

TEST_F(GpuSim, InheritorKeepsDeadCreatorListedUntilItExits) {
  testing::Pipe ready;
  pid_t creator = ::fork();
  if (creator == 0) {
    auto ctx = sim::create_context(dir_, 0, 2048 * kMiB);
    pid_t grandchild = ctx.ok() ? ::fork() : -1;
    if (grandchild == 0) pause_forever();  // inherits the context's descriptors
    testing::write_value<pid_t>(ready.w(), grandchild);
    pause_forever();
  }
  kids_.add(creator);
  ready.close_write();
  auto inheritor = testing::read_value<pid_t>(ready.r());
  ASSERT_TRUE(inheritor);
  ASSERT_GT(*inheritor, 0);
  kids_.add(*inheritor);  // reparented to us (subreaper) once the creator dies

  auto s = snap();
  ASSERT_EQ(s.devices[0].processes.size(), 1U);
  EXPECT_EQ(s.devices[0].processes[0].pid, static_cast<std::uint32_t>(creator));

  kids_.kill_and_reap(creator);
  ASSERT_NE(::kill(creator, 0), 0);  // gone for good
  s = snap();
  // As the driver does: the dead creator's pid is still listed with its memory.
  ASSERT_EQ(s.devices[0].processes.size(), 1U);
  EXPECT_EQ(s.devices[0].processes[0], (GpuProcess{static_cast<std::uint32_t>(creator), 2048 * kMiB}));
  EXPECT_EQ(s.devices[0].memory->used, 2048 * kMiB);

  kids_.kill_and_reap(*inheritor);
  s = snap();
  EXPECT_TRUE(s.devices[0].processes.empty());
  EXPECT_EQ(s.devices[0].memory->used, 0U);
}

TEST_F(GpuSim, ZombieHoldsNothing) {
  pid_t child = spawn_holder(0, 64 * kMiB);
  ASSERT_EQ(snap().devices[0].processes.size(), 1U);
  ::kill(child, SIGKILL);
  ASSERT_TRUE(testing::wait_zombie(child));  // exited, not reaped
  EXPECT_EQ(proc_state(child), 'Z');
  auto s = snap();
  EXPECT_TRUE(s.devices[0].processes.empty());
  EXPECT_EQ(s.devices[0].memory->used, 0U);
  kids_.reap(child);
}

TEST_F(GpuSim, ReleaseDestroysContextEvenWhenInherited) {
  testing::Pipe ready;
  pid_t creator = ::fork();
  if (creator == 0) {
    auto ctx = sim::create_context(dir_, 0, kMiB);
    pid_t grandchild = ctx.ok() ? ::fork() : -1;
    if (grandchild == 0) pause_forever();
    // cuCtxDestroy: gone although the grandchild still has the descriptor.
    if (grandchild > 0 && !ctx->release().ok()) grandchild = -2;
    testing::write_value<pid_t>(ready.w(), grandchild);
    pause_forever();
  }
  kids_.add(creator);
  ready.close_write();
  auto inheritor = testing::read_value<pid_t>(ready.r());
  ASSERT_TRUE(inheritor);
  ASSERT_GT(*inheritor, 0);
  kids_.add(*inheritor);
  EXPECT_TRUE(snap().devices[0].processes.empty());
  kids_.kill_and_reap(creator);
  kids_.kill_and_reap(*inheritor);
}

TEST_F(GpuSim, ContextsOfOnePidOnOneDeviceMerge) {
  testing::Pipe ready;
  pid_t child = ::fork();
  if (child == 0) {
    auto a = sim::create_context(dir_, 0, 1 * kMiB);
    auto b = sim::create_context(dir_, 0, 2 * kMiB);
    auto c = sim::create_context(dir_, 1, 4 * kMiB);
    testing::write_value<int>(ready.w(), a.ok() && b.ok() && c.ok() ? 1 : 0);
    pause_forever();
  }
  kids_.add(child);
  ready.close_write();
  ASSERT_EQ(testing::read_value<int>(ready.r()), 1);
  auto s = snap();
  ASSERT_EQ(s.devices[0].processes.size(), 1U);
  EXPECT_EQ(s.devices[0].processes[0].used_memory, 3 * kMiB);
  EXPECT_EQ(s.devices[0].memory->used, 3 * kMiB);
  ASSERT_EQ(s.devices[1].processes.size(), 1U);
  EXPECT_EQ(s.devices[1].processes[0].used_memory, 4 * kMiB);
}

TEST_F(GpuSim, InProcessContextAndStaleFilesOfDeadPids) {
  // A stale file with our own pid (a predecessor under pid reuse) is skipped.
  const std::string stale = dir_ + "/ctx/" + sim::context_name({0, ::getpid(), 0});
  std::ofstream(stale) << "999\n";
  {
    auto ctx = sim::create_context(dir_, 0, 7 * kMiB);
    ASSERT_TRUE(ctx.ok()) << ctx.error().message;
    EXPECT_EQ(ctx->path(), dir_ + "/ctx/" + sim::context_name({0, ::getpid(), 1}));
    auto s = snap();
    ASSERT_EQ(s.devices[0].processes.size(), 1U);
    EXPECT_EQ(s.devices[0].processes[0], (GpuProcess{static_cast<std::uint32_t>(::getpid()), 7 * kMiB}));
  }
  // Context destroyed in this process = its descriptors closed: released.
  EXPECT_TRUE(snap().devices[0].processes.empty());
}

// A creator in its own PID namespace names the file with its local pid (1);
// while it lives the backend reports its pid as our /proc shows it, as NVML
// called from the host namespace does (FACTS.md: "NSpid: 595 1").
TEST_F(GpuSim, CreatorInPidNamespaceIsReportedByHostPid) {
  testing::Pipe pid_pipe;
  testing::Pipe ready;
  pid_t outer = ::fork();
  if (outer == 0) {
    if (::unshare(CLONE_NEWPID) != 0) {
      testing::write_value<pid_t>(pid_pipe.w(), -errno);
      pause_forever();
    }
    pid_t init = ::fork();  // pid 1 of the new namespace
    if (init == 0) {
      auto ctx = sim::create_context(dir_, 0, 3 * kMiB);
      testing::write_value<int>(ready.w(), ctx.ok() && ::getpid() == 1 ? 1 : 0);
      pause_forever();
    }
    testing::write_value<pid_t>(pid_pipe.w(), init);  // as our namespace sees it
    pause_forever();
  }
  kids_.add(outer);
  pid_pipe.close_write();
  ready.close_write();
  auto inner = testing::read_value<pid_t>(pid_pipe.r());
  ASSERT_TRUE(inner);
  ASSERT_GE(*inner, 0) << "unshare(CLONE_NEWPID) (the suite runs as root): " << std::strerror(-*inner);
  kids_.add(*inner);
  ASSERT_EQ(testing::read_value<int>(ready.r()), 1);
  auto s = snap();
  ASSERT_EQ(s.devices[0].processes.size(), 1U);
  EXPECT_EQ(s.devices[0].processes[0], (GpuProcess{static_cast<std::uint32_t>(*inner), 3 * kMiB}));
}

TEST_F(GpuSim, MissingDeviceIsError) {
  auto ctx = sim::create_context(dir_, 5, kMiB);
  ASSERT_FALSE(ctx.ok());
  EXPECT_EQ(ctx.error().code, ENOENT);
  EXPECT_NE(ctx.error().message.find("nvidia5"), std::string::npos);
}

TEST_F(GpuSim, DeviceMatcherNamesSimFilesByPath) {
  auto m = backend_->device_matcher();
  EXPECT_TRUE(m.majors.empty());
  std::vector<std::string> names;
  for (const auto& n : m.nodes) {
    names.push_back(n.name);
    EXPECT_EQ(n.path, dir_ + "/dev/" + n.name);
    EXPECT_FALSE(n.rdev);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"nvidia-uvm", "nvidia0", "nvidia1", "nvidiactl"}));
}

TEST_F(GpuSim, InitKeepsFirstConfig) {
  ASSERT_TRUE(sim::init_sim_dir(dir_, sim::default_config(8)).ok());
  EXPECT_EQ(snap().devices.size(), 2U);
}

TEST_F(GpuSim, BadConfigIsErrorNamingField) {
  std::ofstream(dir_ + "/config.json", std::ios::trunc)
      << R"({"driver_version": "x", "devices": [{"name": "a", "uuid": "b", "total": -1, "reserved": 0}]})";
  auto s = backend_->snapshot();
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.error().message, dir_ + "/config.json: devices[0].total: expected an unsigned integer");
}

TEST(GpuSimConfig, RoundTripsThroughHandWrittenJson) {
  auto c = sim::default_config(3);
  c.devices[1].name = "quote \" and \\ backslash";
  auto back = parse_sim_config(sim::config_to_json_text(c), "config.json");
  ASSERT_TRUE(back.ok()) << back.error().message;
  EXPECT_EQ(*back, c);
}

TEST(GpuSimConfig, Negative) {
  EXPECT_EQ(parse_sim_config("{", "c.json").error().message, "c.json: not valid JSON (at byte 2)");
  EXPECT_EQ(parse_sim_config(R"({"devices": []})", "c.json").error().message,
            "c.json: driver_version: expected a string");
  EXPECT_EQ(parse_sim_config(R"({"driver_version": "x", "devices": [{"name": "a", "uuid": 1}]})", "c.json")
                .error()
                .message,
            "c.json: devices[0].uuid: expected a string");
  EXPECT_EQ(parse_sim_config(R"({"driver_version": "x", "devices": [{"name": "a", "uuid": "u", "total": 1}]})",
                             "c.json")
                .error()
                .message,
            "c.json: devices[0].reserved: expected an unsigned integer");
}

TEST(GpuSimBackend, UninitialisedDirHasNoDevicesAndSaysWhy) {
  testing::TempDir tmp;
  auto root = sys::HostRoot::open("/");
  ASSERT_TRUE(root.ok());
  auto b = make_sim_backend(*root, SimOptions{tmp.path() + "/nothing"});
  auto s = b->snapshot();
  ASSERT_TRUE(s.ok());
  EXPECT_TRUE(s->devices.empty());
  EXPECT_NE(b->unavailable_reason().find("not initialised"), std::string::npos);
}

TEST(GpuSimBackend, DevicePathsDropTheHostRootPrefix) {
  // Holders' fd links show host paths: /run/gpureap/sim/dev/nvidia0, not /host/run/...
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/run/gpureap/sim";
  ASSERT_TRUE(sim::init_sim_dir(dir, sim::default_config(1)).ok());
  auto root = sys::HostRoot::open(tmp.path());
  ASSERT_TRUE(root.ok());
  const ScopedUnsetEnv no_sim_dir("GPUREAP_SIM_DIR");  // the default is what is tested
  auto b = make_sim_backend(*root, SimOptions{});  // default: <root>/run/gpureap/sim
  auto m = b->device_matcher();
  ASSERT_FALSE(m.nodes.empty());
  EXPECT_EQ(m.nodes.front().path, "/run/gpureap/sim/dev/nvidia-uvm");
}

TEST(GpuSimClient, ResolveSimDir) {
  EXPECT_EQ(sim::resolve_sim_dir(std::string("/x"), "/host"), "/x");
  const ScopedUnsetEnv no_sim_dir("GPUREAP_SIM_DIR");
  EXPECT_EQ(sim::resolve_sim_dir(std::nullopt, "/"), "/run/gpureap/sim");
  EXPECT_EQ(sim::resolve_sim_dir(std::nullopt, "/host/"), "/host/run/gpureap/sim");
}

TEST(GpuSimClient, ContextNames) {
  EXPECT_EQ(sim::parse_context_name("gpu0-pid123-4"), (sim::ContextName{0, 123, 4}));
  EXPECT_EQ(sim::context_name({7, 42, 0}), "gpu7-pid42-0");
  for (const char* bad : {"", "gpu", "gpu0", "gpu0-pid", "gpu0-pid1", "gpu0-pid1-", "gpux-pid1-0", "gpu0-pid0-0",
                          "gpu0-pid-1-0", ".gpu0.tmp-12", "gpu0-pid1-0x", "cpu0-pid1-0"}) {
    EXPECT_FALSE(sim::parse_context_name(bad)) << bad;
  }
}

}  // namespace
}  // namespace gpureap::gpu
