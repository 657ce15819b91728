#include "sys/dir.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace gpureap::sys {
namespace {

namespace fs = std::filesystem;

// A fresh directory under TMPDIR, removed with everything in it.
class ListDir : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string tmpl = (fs::temp_directory_path() / "gpureap-dir-XXXXXX").string();
    ASSERT_NE(::mkdtemp(tmpl.data()), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { fs::remove_all(dir_); }
  void touch(const std::string& name) {
    const int fd = ::open((dir_ / name).c_str(), O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << name;
    ::close(fd);
  }
  fs::path dir_;
};

TEST_F(ListDir, NamesEveryEntryButDotAndDotDotSorted) {
  touch("b");
  touch("a");
  touch(".hidden");
  ASSERT_EQ(::mkdir((dir_ / "sub").c_str(), 0700), 0);
  const auto listing = list_dir(AT_FDCWD, dir_.c_str());
  ASSERT_TRUE(listing.has_value());
  EXPECT_EQ(listing->names, (std::vector<std::string>{".hidden", "a", "b", "sub"}));
}

TEST_F(ListDir, AnEmptyDirectoryListsNothing) {
  const auto listing = list_dir(AT_FDCWD, dir_.c_str());
  ASSERT_TRUE(listing.has_value());
  EXPECT_TRUE(listing->names.empty());
}

TEST_F(ListDir, KeepsTheDirectoryOpenForCallsRelativeToIt) {
  touch("entry");
  const auto listing = list_dir(AT_FDCWD, dir_.c_str());
  ASSERT_TRUE(listing.has_value());
  struct stat st {};
  EXPECT_EQ(::fstatat(listing->dir.get(), "entry", &st, 0), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
}

TEST_F(ListDir, ListsRelativeToADirectoryFdAndTheFdItself) {
  ASSERT_EQ(::mkdir((dir_ / "sub").c_str(), 0700), 0);
  touch("sub/inner");
  const auto parent = list_dir(AT_FDCWD, dir_.c_str());
  ASSERT_TRUE(parent.has_value());
  const auto sub = list_dir(parent->dir.get(), "sub");
  ASSERT_TRUE(sub.has_value());
  EXPECT_EQ(sub->names, std::vector<std::string>{"inner"});
  const auto self = list_dir(sub->dir.get(), ".");
  ASSERT_TRUE(self.has_value());
  EXPECT_EQ(self->names, std::vector<std::string>{"inner"});
}

// Descriptors open in this process now.
std::size_t open_fds() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

TEST_F(ListDir, LeavesNoDescriptorBehindOnceDropped) {
  touch("entry");
  const std::size_t before = open_fds();
  {
    const auto listing = list_dir(AT_FDCWD, dir_.c_str());
    ASSERT_TRUE(listing.has_value());
    EXPECT_EQ(open_fds(), before + 1);  // the directory it keeps open
  }
  EXPECT_EQ(open_fds(), before);
}

TEST_F(ListDir, AMissingDirectoryIsNulloptWithErrno) {
  errno = 0;
  EXPECT_FALSE(list_dir(AT_FDCWD, (dir_ / "absent").c_str()).has_value());
  EXPECT_EQ(errno, ENOENT);
}

TEST_F(ListDir, AFileIsNotADirectory) {
  touch("plain");
  errno = 0;
  EXPECT_FALSE(list_dir(AT_FDCWD, (dir_ / "plain").c_str()).has_value());
  EXPECT_EQ(errno, ENOTDIR);
}

}  // namespace
}  // namespace gpureap::sys
