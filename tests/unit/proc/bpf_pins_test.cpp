// The scan's programs pinned between processes (bpf_pins.hpp, --bpf-pin-dir):
// on a bpffs mounted for the test in a temporary directory (unmounted at the
// end, which frees whatever was pinned there), with a real process holding a
// simulated device file. A second KernelPrograms stands for the next process.
#include "proc/bpf_pins.hpp"

#include <gtest/gtest.h>
#include <linux/bpf.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "child.hpp"
#include "proc/kernel_fds.hpp"
#include "proc/scan.hpp"
#include "sim_device.hpp"

namespace gpureap::proc {
namespace {

namespace fs = std::filesystem;
using test::after_this_clock_tick;
using test::Child;
using test::Pipes;
using test::spawn_ready;

// A temporary directory with a bpffs mounted on bpffs/ and a simulated
// device file, nvidia0, that `holder` keeps open twice.
struct PinFixture {
  fs::path path;
  fs::path bpffs;
  bool mounted = false;
  std::string dev;
  DeviceMatcher devices;
  Pipes pipes;
  std::optional<Child> holder;

  PinFixture() {
    std::string tmpl = (fs::temp_directory_path() / "gpureap-pins-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) return;
    path = fs::canonical(tmpl);
    bpffs = path / "bpffs";
    fs::create_directory(bpffs);
    mounted = ::mount("bpf", bpffs.c_str(), "bpf", 0, nullptr) == 0;
    dev = (path / "nvidia0").string();
    const auto node = test::sim_device_file("nvidia0", dev);
    if (!node) return;
    devices.nodes.push_back(*node);
    holder.emplace(spawn_ready(pipes, [&] {
      ::open(dev.c_str(), O_RDONLY);
      ::open(dev.c_str(), O_RDONLY);
    }));
    after_this_clock_tick();
  }
  ~PinFixture() {
    if (holder) holder->reap();
    if (mounted) ::umount2(bpffs.c_str(), MNT_DETACH);
    std::error_code ec;
    if (!path.empty()) fs::remove_all(path, ec);
  }
  [[nodiscard]] bool ready() const {
    return mounted && holder && holder->started() && !devices.nodes.empty();
  }

  // One scan, as one process of --bpf-pin-dir DIR would run it.
  sys::Result<ProcessTable> scan(KernelPrograms& programs) const {
    ScanOptions opts;
    opts.devices = &devices;
    opts.fd_source = FdSource::kernel;
    opts.kernel_programs = &programs;
    auto root = sys::HostRoot::open("/");
    if (!root) return root.error();
    return scan_processes(*root, opts);
  }
  [[nodiscard]] std::vector<std::string> entries(const fs::path& dir) const {
    std::vector<std::string> names;
    std::error_code ec;
    for (const auto& e : fs::directory_iterator(dir, ec))
      names.push_back(e.path().filename().string());
    std::sort(names.begin(), names.end());
    return names;
  }
};

const Process* find(const ProcessTable& t, pid_t pid) {
  for (const auto& p : t.processes) {
    if (p.pid == pid) return &p;
  }
  return nullptr;
}

std::string pinned_entry(const std::string& fds_pin) {
  return fds_pin.substr(fds_pin.find(' ') + 1);
}

// What one process of --bpf-pin-dir DIR scans with.
KernelPrograms pinning_to(const std::string& dir) {
  KernelPrograms programs;
  programs.pin_dir = dir;
  return programs;
}

// The entry that one process of --bpf-pin-dir `dir` pinned, left as it
// ended; "" (and a failure) where it pinned nothing.
std::string pinned_by_an_ended_process(const PinFixture& f, const std::string& dir) {
  KernelPrograms first = pinning_to(dir);
  auto a = f.scan(first);
  if (!a.ok()) {
    ADD_FAILURE() << a.error().message;
    return "";
  }
  if (a->stats.fds_pin.rfind("pinned ", 0) != 0) {
    ADD_FAILURE() << a->stats.fds_pin;
    return "";
  }
  return pinned_entry(a->stats.fds_pin);
}

// Sets `path`'s access and modification times to `seconds` ago (0 on success).
int last_used(const fs::path& path, std::int64_t seconds) {
  const timespec at[2] = {{::time(nullptr) - seconds, 0}, {::time(nullptr) - seconds, 0}};
  return ::utimensat(AT_FDCWD, path.c_str(), at, 0);
}

long bpf(int cmd, bpf_attr& attr) {
  return ::syscall(SYS_bpf, cmd, &attr, sizeof attr);
}

// The object pinned at `path`, open.
sys::UniqueFd pinned_object(const std::string& path) {
  bpf_attr attr{};
  attr.pathname = reinterpret_cast<std::uintptr_t>(path.c_str());
  return sys::UniqueFd(static_cast<int>(bpf(BPF_OBJ_GET, attr)));
}

// The pinned map at `path` described, or a zeroed info when it cannot be.
bpf_map_info map_info(const std::string& path) {
  bpf_map_info info{};
  const sys::UniqueFd map = pinned_object(path);
  bpf_attr attr{};
  attr.info.bpf_fd = static_cast<std::uint32_t>(map.get());
  attr.info.info_len = sizeof info;
  attr.info.info = reinterpret_cast<std::uintptr_t>(&info);
  if (!map || bpf(BPF_OBJ_GET_INFO_BY_FD, attr) != 0) return bpf_map_info{};
  return info;
}

TEST(BpfPins, TheNextProcessTakesThePinnedProgramsInsteadOfLoading) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.bpffs / "gpureap").string();
  KernelPrograms first = pinning_to(dir);
  auto a = f.scan(first);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->stats.fds_from, "bpf");
  EXPECT_EQ(a->stats.fds_pin.rfind("pinned " + dir + "/scan-" + own_build_id() + "-", 0), 0U)
      << a->stats.fds_pin;
  EXPECT_EQ(first.loads, 1U);
  const fs::path entry = pinned_entry(a->stats.fds_pin);
  EXPECT_EQ(f.entries(entry), (std::vector<std::string>{"data", "prog-" + a->stats.fds_loader}));
  first = KernelPrograms{};  // that process ends; the pins stay
  // Unused for two days, then taken: taking it marks it used (stale entries go).
  ASSERT_EQ(last_used(entry, 2L * 86400), 0);

  KernelPrograms next = pinning_to(dir);
  auto b = f.scan(next);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->stats.fds_pin, "reused " + entry.string());
  EXPECT_EQ(next.loads, 0U);
  EXPECT_EQ(b->stats.fds_loader, a->stats.fds_loader);
  struct stat taken {};
  ASSERT_EQ(::stat(entry.c_str(), &taken), 0);
  EXPECT_GT(taken.st_mtim.tv_sec, ::time(nullptr) - 3600);
  // The pinned program walked: the kernel's answer names each description.
  const Process* p = find(*b, f.holder->pid());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->gpu_fds, (std::vector<DeviceUse>{{"nvidia0", 2}}));
  EXPECT_EQ(p->gpu_files.size(), 2U);
  next = KernelPrograms{};
  // The css_set re-check switched the pinned .data off; the next taker switches it on.
  KernelPrograms third = pinning_to(dir);
  auto c = f.scan(third);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->stats.fds_pin, "reused " + entry.string());
  ASSERT_NE(find(*c, f.holder->pid()), nullptr);
  EXPECT_EQ(find(*c, f.holder->pid())->gpu_files.size(), 2U);
}

TEST(BpfPins, ProgramsInUseByAnotherProcessAreNotShared) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.bpffs / "gpureap").string();
  KernelPrograms holder = pinning_to(dir);  // still scanning: its entry stays locked
  auto a = f.scan(holder);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->stats.fds_pin.rfind("pinned ", 0), 0U) << a->stats.fds_pin;

  KernelPrograms other = pinning_to(dir);
  auto b = f.scan(other);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(other.loads, 1U);  // its own programs
  EXPECT_EQ(b->stats.fds_pin,
            "not pinned: " + pinned_entry(a->stats.fds_pin) + " is in use by another scan");
  const Process* p = find(*b, f.holder->pid());
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(p->gpu_files.size(), 2U);
}

TEST(BpfPins, AHalfPinnedEntryIsRemovedAndPinnedAgain) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.bpffs / "gpureap").string();
  const std::string entry = pinned_by_an_ended_process(f, dir);
  ASSERT_FALSE(entry.empty());
  // As if the pinning process died between its two pins.
  ASSERT_EQ(::unlink((entry + "/data").c_str()), 0);
  KernelPrograms next = pinning_to(dir);
  auto b = f.scan(next);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->stats.fds_pin, "pinned " + entry);
  EXPECT_EQ(next.loads, 1U);
  EXPECT_EQ(f.entries(entry).size(), 2U);
}

TEST(BpfPins, AProcessKeepingItsProgramsSaysOnLaterScansThatItReusesItsEntry) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.bpffs / "gpureap").string();
  KernelPrograms programs = pinning_to(dir);  // an exporter's, kept across scans
  auto a = f.scan(programs);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->stats.fds_pin.rfind("pinned ", 0), 0U) << a->stats.fds_pin;
  auto b = f.scan(programs);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->stats.fds_pin, "reused " + pinned_entry(a->stats.fds_pin));
  EXPECT_EQ(programs.loads, 1U);
  ASSERT_NE(find(*b, f.holder->pid()), nullptr);
  EXPECT_EQ(find(*b, f.holder->pid())->gpu_files.size(), 2U);
}

TEST(BpfPins, AProcessThatCouldNotPinSaysWhyOnLaterScansToo) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.path / "not-bpffs").string();
  KernelPrograms programs = pinning_to(dir);
  auto a = f.scan(programs);
  ASSERT_TRUE(a.ok()) << a.error().message;
  auto b = f.scan(programs);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->stats.fds_pin, "not pinned: " + dir + " is not on a bpffs");
  EXPECT_EQ(programs.loads, 1U);
}

TEST(BpfPins, AnEntryWhoseDataMapIsNotItsProgramsOwnIsReplaced) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.bpffs / "gpureap").string();
  const std::string entry = pinned_by_an_ended_process(f, dir);
  ASSERT_FALSE(entry.empty());
  // A map shaped like the .data map, but not the program's: its switches
  // would never reach the program.
  const bpf_map_info own = map_info(entry + "/data");
  ASSERT_NE(own.id, 0U);
  bpf_attr create{};
  create.map_type = BPF_MAP_TYPE_ARRAY;
  create.key_size = sizeof(std::uint32_t);
  create.value_size = own.value_size;
  create.max_entries = 1;
  const sys::UniqueFd foreign(static_cast<int>(bpf(BPF_MAP_CREATE, create)));
  ASSERT_TRUE(foreign.valid()) << std::strerror(errno);
  const std::string data_path = entry + "/data";
  ASSERT_EQ(::unlink(data_path.c_str()), 0);
  bpf_attr pin{};
  pin.pathname = reinterpret_cast<std::uintptr_t>(data_path.c_str());
  pin.bpf_fd = static_cast<std::uint32_t>(foreign.get());
  ASSERT_EQ(bpf(BPF_OBJ_PIN, pin), 0) << std::strerror(errno);
  const std::uint32_t foreign_id = map_info(entry + "/data").id;
  ASSERT_NE(foreign_id, 0U);

  KernelPrograms next = pinning_to(dir);
  auto b = f.scan(next);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->stats.fds_pin, "pinned " + entry);
  EXPECT_EQ(next.loads, 1U);
  const std::uint32_t now_id = map_info(entry + "/data").id;
  EXPECT_NE(now_id, 0U);
  EXPECT_NE(now_id, foreign_id);
}

TEST(BpfPins, AnEntryWhoseProgramsWouldNotStartIsReplaced) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.bpffs / "gpureap").string();
  const std::string entry = pinned_by_an_ended_process(f, dir);
  ASSERT_FALSE(entry.empty());
  // A frozen .data map takes no switch from user space: the restart fails.
  {
    const sys::UniqueFd data = pinned_object(entry + "/data");
    ASSERT_TRUE(data.valid()) << std::strerror(errno);
    bpf_attr freeze{};
    freeze.map_fd = static_cast<std::uint32_t>(data.get());
    ASSERT_EQ(bpf(BPF_MAP_FREEZE, freeze), 0) << std::strerror(errno);
  }
  const std::uint32_t frozen_id = map_info(entry + "/data").id;

  KernelPrograms next = pinning_to(dir);
  auto b = f.scan(next);
  ASSERT_TRUE(b.ok()) << b.error().message;
  EXPECT_EQ(b->stats.fds_pin.rfind(
                "pinned " + entry + "; the one pinned there before would not start: ", 0),
            0U)
      << b->stats.fds_pin;
  EXPECT_EQ(next.loads, 1U);
  EXPECT_NE(map_info(entry + "/data").id, frozen_id);
  ASSERT_NE(find(*b, f.holder->pid()), nullptr);
  EXPECT_EQ(find(*b, f.holder->pid())->gpu_files.size(), 2U);
  next = KernelPrograms{};
  // What replaced it starts.
  KernelPrograms third = pinning_to(dir);
  auto c = f.scan(third);
  ASSERT_TRUE(c.ok()) << c.error().message;
  EXPECT_EQ(c->stats.fds_pin, "reused " + entry);
  EXPECT_EQ(third.loads, 0U);
}

TEST(BpfPins, ADirectoryOffBpffsPinsNothingAndTheScanGoesOn) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const std::string dir = (f.path / "not-bpffs").string();
  KernelPrograms programs = pinning_to(dir);
  auto a = f.scan(programs);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->stats.fds_pin, "not pinned: " + dir + " is not on a bpffs");
  EXPECT_FALSE(fs::exists(dir));  // nothing created off bpffs
  EXPECT_EQ(a->stats.fds_from, "bpf");
  ASSERT_NE(find(*a, f.holder->pid()), nullptr);
  EXPECT_EQ(find(*a, f.holder->pid())->gpu_files.size(), 2U);
}

TEST(BpfPins, EntriesUnusedForADayOrBeyondEightAreRemovedWhereNobodyHoldsThem) {
  PinFixture f;
  ASSERT_TRUE(f.ready()) << "mount bpffs on " << f.bpffs;
  const fs::path dir = f.bpffs / "gpureap";
  fs::create_directory(dir);
  // Other builds' entries: one unused for two days, one in use (locked) as old.
  const fs::path old_entry = dir / "scan-0ld-0000000000000001";
  const fs::path held_entry = dir / "scan-he1d-0000000000000002";
  fs::create_directory(old_entry);
  fs::create_directory(held_entry);
  ASSERT_EQ(last_used(old_entry, 2L * 86400), 0);
  ASSERT_EQ(last_used(held_entry, 2L * 86400), 0);
  sys::UniqueFd held(::open(held_entry.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  ASSERT_TRUE(held.valid());
  ASSERT_EQ(::flock(held.get(), LOCK_EX), 0);
  // Eight recent ones: with the new entry, one too many.
  for (int i = 0; i < 8; ++i) {
    const fs::path recent =
        dir / ("scan-rec" + std::to_string(i) + "-000000000000000" + std::to_string(i));
    fs::create_directory(recent);
    ASSERT_EQ(last_used(recent, 100 - i), 0);
  }
  KernelPrograms programs = pinning_to(dir.string());
  auto a = f.scan(programs);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_EQ(a->stats.fds_pin.rfind("pinned ", 0), 0U) << a->stats.fds_pin;
  const auto left = f.entries(dir);
  EXPECT_EQ(std::count(left.begin(), left.end(), old_entry.filename().string()), 0);
  EXPECT_EQ(std::count(left.begin(), left.end(), held_entry.filename().string()), 1);
  EXPECT_EQ(std::count(left.begin(), left.end(), "scan-rec0-0000000000000000"), 0);  // least recent
  for (int i = 1; i < 8; ++i) {
    EXPECT_EQ(std::count(left.begin(), left.end(),
                         "scan-rec" + std::to_string(i) + "-000000000000000" + std::to_string(i)),
              1)
        << i;
  }
  EXPECT_EQ(std::count(left.begin(), left.end(),
                       fs::path(pinned_entry(a->stats.fds_pin)).filename().string()),
            1);
}

TEST(BpfPins, TheEntryNameIsTheBuildAndAHashOfTheKey) {
  const std::string id = own_build_id();
  ASSERT_FALSE(id.empty());  // the project links with a GNU build id
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos) << id;
  const std::string a = pin_entry_name(id, {1, 2, 3});
  EXPECT_EQ(a.rfind("scan-" + id + "-", 0), 0U);
  EXPECT_EQ(a.size(), 5 + id.size() + 1 + 16);
  EXPECT_EQ(a, pin_entry_name(id, {1, 2, 3}));
  EXPECT_NE(a, pin_entry_name(id, {1, 2, 4}));
  EXPECT_NE(a, pin_entry_name(id, {1, 2}));
}

}  // namespace
}  // namespace gpureap::proc
