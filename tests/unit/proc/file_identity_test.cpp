// Which descriptors share an open file description: the kernel iterator's
// file objects and kcmp's numbering must group real processes alike (a parent
// and the child that inherited its descriptors; a process that opened the same
// file itself), and the pure numbering must survive a comparison that lies.
#include "proc/file_identity.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "child.hpp"
#include "proc/scan.hpp"
#include "sim_device.hpp"

namespace gpureap::proc {
namespace {

namespace fs = std::filesystem;
using test::after_this_clock_tick;
using test::Child;
using test::Pipes;
using test::spawn_ready;

TEST(IdsByOrder, EqualItemsShareAnIdAndOthersDoNot) {
  const std::vector<int> keys = {7, 3, 7, 1, 3, 9};
  auto ids = ids_by_order(keys.size(), [&](std::size_t a, std::size_t b) {
    return keys[a] < keys[b] ? -1 : keys[a] > keys[b] ? 1 : 0;
  });
  ASSERT_EQ(ids.size(), keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) {
    for (std::size_t j = 0; j < keys.size(); ++j) {
      EXPECT_EQ(ids[i] == ids[j], keys[i] == keys[j]) << i << " " << j;
    }
  }
  EXPECT_EQ(*std::min_element(ids.begin(), ids.end()), 1U);
  EXPECT_TRUE(ids_by_order(0, [](std::size_t, std::size_t) { return 0; }).empty());
}

TEST(IdsByOrder, AComparisonThatContradictsItselfGivesIdsNotACrash) {
  // As when a descriptor is closed mid-sort: answers that are no order at all.
  unsigned calls = 0;
  auto ids = ids_by_order(257, [&](std::size_t a, std::size_t b) {
    ++calls;
    return static_cast<int>((a * 7 + b * 13 + calls) % 3) - 1;
  });
  EXPECT_EQ(ids.size(), 257U);
  for (auto id : ids) EXPECT_GE(id, 1U);
}

// The pid whose PPid is `parent` (kernels without CONFIG_PROC_CHILDREN have no
// children file).
pid_t only_child(pid_t parent) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);) {
      if (line.rfind("PPid:", 0) == 0 && std::stol(line.substr(5)) == parent) {
        return static_cast<pid_t>(std::stol(name));
      }
    }
  }
  return -1;
}

// A device file, a parent holding it twice that forked a child inheriting both
// descriptions, and a stranger that opened the same file itself.
class SharedDescriptions : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(::geteuid(), 0U) << "kcmp and the kernel iterator need root";
    std::string tmpl = (fs::temp_directory_path() / "gpureap-files-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = fs::canonical(tmpl);
    dev_ = (dir_ / "nvidia0").string();
    const auto node = test::sim_device_file("nvidia0", dev_);
    ASSERT_TRUE(node.has_value());
    devices_.nodes.push_back(*node);
    // The parent opens twice, then forks the child, which pauses until
    // PDEATHSIG ends it with the parent.
    const std::string dev = dev_;
    parent_.emplace(spawn_ready(parent_pipes_, [&] {
      ::open(dev.c_str(), O_RDWR);
      ::open(dev.c_str(), O_RDWR);
      if (::fork() == 0) {
        ::prctl(PR_SET_PDEATHSIG, SIGKILL);
        for (;;) ::pause();
      }
    }));
    ASSERT_TRUE(parent_->started());
    child_ = only_child(parent_->pid());
    stranger_.emplace(spawn_ready(stranger_pipes_, [&] { ::open(dev.c_str(), O_RDWR); }));
    ASSERT_TRUE(parent_->started() && stranger_->started() && child_ > 0);
  }
  void TearDown() override {
    parent_.reset();  // its child follows (PDEATHSIG) and is reaped by init
    stranger_.reset();
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }

  ProcessTable scan(FdSource source) {
    // The scan takes the iterator's answer only for processes started before
    // the clock tick it began in (a younger one is walked under /proc): let
    // the tick these were started in pass.
    after_this_clock_tick();
    auto root = sys::HostRoot::open("/");
    EXPECT_TRUE(root.ok());
    ScanOptions opts;
    opts.devices = &devices_;
    opts.fd_source = source;
    auto t = scan_processes(*root, opts);
    EXPECT_TRUE(t.ok()) << t.error().message;
    return std::move(t).value();
  }

  static Process* find(ProcessTable& t, pid_t pid) {
    for (auto& p : t.processes) {
      if (p.pid == pid) return &p;
    }
    return nullptr;
  }

  // The three processes' files: the parent's and the child's are the same two
  // descriptions, the stranger's its own one.
  void expect_shared(const Process& parent, const Process& child, const Process& stranger) {
    EXPECT_EQ(parent.gpu_files.size(), 2U);
    EXPECT_EQ(parent.gpu_files, child.gpu_files);
    ASSERT_EQ(stranger.gpu_files.size(), 1U);
    EXPECT_EQ(std::count(parent.gpu_files.begin(), parent.gpu_files.end(), stranger.gpu_files[0]),
              0);
  }

  fs::path dir_;
  std::string dev_;
  DeviceMatcher devices_;
  Pipes parent_pipes_, stranger_pipes_;
  std::optional<Child> parent_, stranger_;
  pid_t child_ = -1;
};

TEST_F(SharedDescriptions, TheKernelIteratorGivesEachDescriptionsFileObject) {
  auto t = scan(FdSource::kernel);
  Process* parent = find(t, parent_->pid());
  Process* child = find(t, child_);
  Process* stranger = find(t, stranger_->pid());
  ASSERT_TRUE(parent && child && stranger);
  expect_shared(*parent, *child, *stranger);
  EXPECT_EQ(parent->gpu_fd_numbers.size(), 2U);
}

TEST_F(SharedDescriptions, KcmpNumbersTheProcfsWalksDescriptorsAlike) {
  auto t = scan(FdSource::procfs);
  Process* parent = find(t, parent_->pid());
  Process* child = find(t, child_);
  Process* stranger = find(t, stranger_->pid());
  ASSERT_TRUE(parent && child && stranger);
  EXPECT_TRUE(parent->gpu_files.empty());  // the walk alone cannot tell
  auto root = sys::HostRoot::open("/");
  ASSERT_TRUE(root.ok());
  auto st = identify_files_by_kcmp(*root, {parent, child, stranger});
  ASSERT_TRUE(st.ok()) << st.error().message;
  expect_shared(*parent, *child, *stranger);
}

TEST_F(SharedDescriptions, KcmpDeclinesBeyondItsBudgetAndLeavesTheFilesAsTheyWere) {
  auto t = scan(FdSource::procfs);
  Process* parent = find(t, parent_->pid());
  Process* child = find(t, child_);
  ASSERT_TRUE(parent && child);
  auto root = sys::HostRoot::open("/");
  ASSERT_TRUE(root.ok());
  auto st = identify_files_by_kcmp(*root, {parent, child}, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_EQ(st.error().code, E2BIG);
  EXPECT_NE(st.error().message.find("4 GPU descriptors"), std::string::npos) << st.error().message;
  EXPECT_TRUE(parent->gpu_files.empty());
}

}  // namespace
}  // namespace gpureap::proc
