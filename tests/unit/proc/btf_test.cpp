// The streaming BTF reader on hand-built BTF (every record kind it must step
// over, bitfields, names cut by the 64 KiB window, damage) and on the running
// kernel's own /sys/kernel/btf/vmlinux.
#include "proc/btf.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

namespace gpureap::proc {
namespace {

// Builds a BTF blob: types appended in id order, names interned on the fly.
class BtfWriter {
 public:
  BtfWriter() { strings_.push_back('\0'); }
  std::uint32_t name(const std::string& n) {
    if (n.empty()) return 0;
    auto off = static_cast<std::uint32_t>(strings_.size());
    strings_.insert(strings_.end(), n.begin(), n.end());
    strings_.push_back('\0');
    return off;
  }
  void type(const std::string& n, unsigned kind, unsigned vlen, std::uint32_t size_or_type,
            bool kind_flag = false) {
    put(name(n));
    put((kind_flag ? 0x80000000U : 0U) | (kind << 24) | vlen);
    put(size_or_type);
  }
  void member(const std::string& n, std::uint32_t type, std::uint32_t offset) {
    put(name(n));
    put(type);
    put(offset);
  }
  void put(std::uint32_t v) {
    const auto* b = reinterpret_cast<const char*>(&v);
    types_.insert(types_.end(), b, b + 4);
  }
  std::string blob(std::uint16_t magic = 0xeB9F) const {
    std::string out(24, '\0');
    const std::uint32_t hdr = 24, type_off = 0,
                        type_len = static_cast<std::uint32_t>(types_.size());
    const std::uint32_t str_off = type_len, str_len = static_cast<std::uint32_t>(strings_.size());
    std::memcpy(out.data(), &magic, 2);
    out[2] = 1;
    for (auto [at, v] :
         {std::pair{4, hdr}, {8, type_off}, {12, type_len}, {16, str_off}, {20, str_len}}) {
      std::memcpy(out.data() + at, &v, 4);
    }
    out.append(types_.begin(), types_.end());
    out.append(strings_.begin(), strings_.end());
    return out;
  }

 private:
  std::vector<char> types_;
  std::vector<char> strings_;
};

ReadAt over(const std::string& blob) {
  return [&blob](std::uint64_t off, char* buf, std::size_t len) -> ssize_t {
    if (off >= blob.size()) return 0;
    std::size_t n = std::min<std::size_t>(len, blob.size() - off);
    std::memcpy(buf, blob.data() + off, n);
    return static_cast<ssize_t>(n);
  };
}

// Ids: 1 int, 2 ptr, 3 array, 4 enum(2), 5 task_struct, 6 func_proto(1), 7 func, 8 flags struct
// (bitfields), 9 var, 10 datasec(1), 11 float, 12 decl_tag, 13 type_tag, 14 enum64(1), 15 file, 16
// func.
BtfWriter sample() {
  BtfWriter w;
  w.type("int", 1, 0, 4);
  w.put(0x01000020);
  w.type("", 2, 0, 1);
  w.type("", 3, 0, 0);
  w.put(1), w.put(1), w.put(16);
  w.type("pid_type", 6, 2, 4);
  w.put(w.name("PIDTYPE_PID")), w.put(0);
  w.put(w.name("PIDTYPE_TGID")), w.put(1);
  w.type("task_struct", 4, 3, 4096);
  w.member("state", 1, 0);
  w.member("pid", 1, 2464 * 8);
  w.member("tgid", 1, 2468 * 8);
  w.type("", 13, 1, 1);
  w.put(w.name("x")), w.put(1);
  w.type("bpf_iter_task_file", 12, 1, 6);
  w.type("flags", 4, 2, 8, true);
  w.member("bits", 1, (3U << 24) | 5);  // a 3-bit bitfield: never an answer
  w.member("whole", 1, 32);             // kind_flag set, bitfield size 0: a plain member
  w.type("v", 14, 0, 1);
  w.put(0);
  w.type(".data", 15, 1, 8);
  w.put(9), w.put(0), w.put(4);
  w.type("double", 16, 0, 8);
  w.type("tag", 17, 0, 5);
  w.put(0xffffffffU);
  w.type("", 18, 0, 1);
  w.type("big", 19, 1, 8);
  w.put(w.name("BIG")), w.put(1), w.put(0);
  w.type("file", 4, 1, 256);
  w.member("f_inode", 2, 32 * 8);
  w.type("other_func", 12, 0, 6);
  return w;
}

BtfQuery sample_query() {
  BtfQuery q;
  q.members = {
      {"task_struct", "tgid"}, {"task_struct", "pid"}, {"file", "f_inode"}, {"flags", "whole"}};
  q.funcs = {"bpf_iter_task_file"};
  return q;
}

TEST(Btf, FindsMembersAndFuncsPastEveryKind) {
  const std::string blob = sample().blob();
  auto a = query_btf(over(blob), sample_query(), "sample");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->complete(sample_query()));
  EXPECT_EQ(a->member_offsets.at("task_struct.pid"), 2464u);
  EXPECT_EQ(a->member_offsets.at("task_struct.tgid"), 2468u);
  EXPECT_EQ(a->member_offsets.at("file.f_inode"), 32u);
  EXPECT_EQ(a->member_offsets.at("flags.whole"), 4u);
  EXPECT_EQ(a->func_ids.at("bpf_iter_task_file"), 7u);
  EXPECT_EQ(a->struct_sizes.at("task_struct"), 4096u);
  EXPECT_EQ(a->struct_sizes.at("file"), 256u);
}

TEST(Btf, BitfieldsAndAbsentNamesAreNoAnswer) {
  const std::string blob = sample().blob();
  BtfQuery q;
  q.members = {{"flags", "bits"}, {"task_struct", "start_boottime"}, {"nosuch", "x"}};
  q.funcs = {"nosuch_func", "int"};  // "int" names an INT, not a FUNC
  auto a = query_btf(over(blob), q, "sample");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->member_offsets.empty());
  EXPECT_TRUE(a->func_ids.empty());
  EXPECT_FALSE(a->complete(q));
}

TEST(Btf, NamesCutByTheReadWindowAreFound) {
  // 70,000 bytes of other names first: "task_struct" and "tgid" land past the
  // first 64 KiB window, and some name straddles its edge.
  BtfWriter w;
  for (int i = 0; i < 7000; ++i) w.type("pad_struct_" + std::to_string(i), 4, 0, 0);
  w.type("task_struct", 4, 1, 8);
  w.member("tgid", 0, 32);
  w.type("bpf_iter_task_file", 12, 0, 0);
  BtfQuery q;
  q.members = {{"task_struct", "tgid"}};
  q.funcs = {"bpf_iter_task_file"};
  const std::string blob = w.blob();
  ASSERT_GT(blob.size(), 65536u * 2);
  auto a = query_btf(over(blob), q, "big");
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_EQ(a->member_offsets.at("task_struct.tgid"), 4u);
  EXPECT_EQ(a->func_ids.at("bpf_iter_task_file"), 7002u);
}

TEST(Btf, DamageIsAnErrorNamingTheSource) {
  const std::string good = sample().blob();
  EXPECT_NE(query_btf(over(sample().blob(0x1234)), sample_query(), "bad.btf")
                .error()
                .message.find("bad.btf: not BTF"),
            std::string::npos);
  EXPECT_FALSE(query_btf(over(good.substr(0, 10)), sample_query(), "cut").ok());
  // A type record cut in the middle: the section claims more than the file holds.
  EXPECT_FALSE(query_btf(over(good.substr(0, 24 + 40)), sample_query(), "cut").ok());
  // An unknown kind cannot be stepped over.
  BtfWriter w;
  w.type("x", 31, 0, 0);
  auto a = query_btf(over(w.blob()), sample_query(), "future.btf");
  ASSERT_FALSE(a.ok());
  EXPECT_NE(a.error().message.find("unknown kind 31"), std::string::npos) << a.error().message;
  // A read error keeps its errno.
  auto failing = [](std::uint64_t, char*, std::size_t) -> ssize_t {
    errno = EIO;
    return -1;
  };
  auto e = query_btf(failing, sample_query(), "eio");
  ASSERT_FALSE(e.ok());
  EXPECT_EQ(e.error().code, EIO);
}

TEST(Btf, TheRunningKernelDescribesWhatTheIteratorReads) {
  int fd = ::open("/sys/kernel/btf/vmlinux", O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0)
      << "this kernel has no BTF (CONFIG_DEBUG_INFO_BTF): the iterator cannot run here";
  BtfQuery q;
  q.members = {{"task_struct", "tgid"}, {"task_struct", "pid"}, {"task_struct", "start_boottime"},
               {"file", "f_inode"},     {"inode", "i_rdev"},    {"super_block", "s_dev"}};
  q.funcs = {"bpf_iter_task_file"};
  auto a =
      query_btf([fd](std::uint64_t off, char* buf,
                     std::size_t len) { return ::pread(fd, buf, len, static_cast<off_t>(off)); },
                q, "/sys/kernel/btf/vmlinux");
  ::close(fd);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a->complete(q));
  // pid and tgid are adjacent pid_t members in every kernel since 2.6.
  EXPECT_EQ(a->member_offsets.at("task_struct.tgid"), a->member_offsets.at("task_struct.pid") + 4);
}

}  // namespace
}  // namespace gpureap::proc
