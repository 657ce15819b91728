// The process model every other layer reads: one entry per thread-group leader,
// filled by the scan from /proc/<pid>/{status,stat,cmdline,cgroup,fd,environ}.
#pragma once

#include <sys/types.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <initializer_list>
#include <iterator>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gpureap::proc {

// One line of /proc/<pid>/cgroup: "hierarchy-ID:controller-list:cgroup-path".
struct CgroupLine {
  unsigned hierarchy_id = 0;
  std::string controllers;  // "memory", "cpu,cpuacct", "name=systemd", "" for the v2 line
  std::string path;         // may itself contain ':' (misconfigured containerd form)
  bool operator==(const CgroupLine&) const = default;
};

// A process's /proc/<pid>/cgroup lines, shared by every process the scan
// gave the same lines (one css_set: a pod's processes, a node's thousands of
// one service), so a node of thousands keeps one copy per css_set (trace's
// memory target is 10 MiB). Read like the vector it holds; assigning replaces.
class CgroupLines {
 public:
  CgroupLines() = default;
  CgroupLines(std::vector<CgroupLine> lines)  // implicit: assigned like the vector it holds
      : lines_(lines.empty() ? nullptr
                             : std::make_shared<const std::vector<CgroupLine>>(std::move(lines))) {}

  [[nodiscard]] const std::vector<CgroupLine>& get() const { return lines_ ? *lines_ : none(); }
  operator const std::vector<CgroupLine>&() const { return get(); }
  [[nodiscard]] bool empty() const { return get().empty(); }
  [[nodiscard]] std::size_t size() const { return get().size(); }
  const CgroupLine& operator[](std::size_t i) const { return get()[i]; }
  [[nodiscard]] auto begin() const { return get().begin(); }
  [[nodiscard]] auto end() const { return get().end(); }
  void clear() { lines_.reset(); }
  bool operator==(const CgroupLines& o) const { return get() == o.get(); }
  bool operator==(const std::vector<CgroupLine>& o) const { return get() == o; }

 private:
  static const std::vector<CgroupLine>& none() {
    static const std::vector<CgroupLine> empty_lines;
    return empty_lines;
  }
  std::shared_ptr<const std::vector<CgroupLine>> lines_;
};

// A process's argv, kept as /proc/PID/cmdline holds it: one text, each
// argument ended by a NUL, read as a sequence of string_views. One
// allocation per process where a vector of strings made one per argument:
// the scan builds one per process of the node, and on a fleet of 2,000
// those allocations were ~7 % of trace's time. The text is immutable and
// shared: copies cost no allocation, and processes with the same argv (a
// server's forked workers, DataLoader workers, torchrun's ranks) can hold one
// text (from_text's `like`). An argument never holds a NUL (the kernel's
// cannot); push_back would split one that did.
class Argv {
 public:
  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = std::string_view;
    using difference_type = std::ptrdiff_t;
    using pointer = void;
    using reference = std::string_view;
    const_iterator() = default;
    explicit const_iterator(const char* at) : at_(at) {}
    std::string_view operator*() const { return at_; }  // up to its NUL
    const_iterator& operator++() {
      at_ += std::char_traits<char>::length(at_) + 1;
      return *this;
    }
    const_iterator operator++(int) {
      const_iterator was = *this;
      ++*this;
      return was;
    }
    bool operator==(const const_iterator&) const = default;

   private:
    const char* at_ = nullptr;
  };
  using iterator = const_iterator;
  using value_type = std::string_view;
  using size_type = std::size_t;

  Argv() = default;
  Argv(std::initializer_list<std::string_view> args) {
    for (std::string_view a : args) push_back(a);
  }
  // The text of /proc/PID/cmdline: split at NULs; a last argument without its
  // NUL is kept (processes that rewrite their argv drop it). Where `like`
  // holds this very text, the result shares it: no allocation, no copy.
  static Argv from_text(std::string_view text) { return from_text(text, Argv()); }
  static Argv from_text(std::string_view text, const Argv& like) {
    if (text.empty()) return {};
    if (text == like.text()) return like;
    const bool ended = text.back() == '\0';
    Argv a;
    a.adopt(text, ended ? std::string_view{} : std::string_view("\0", 1));
    // memchr from NUL to NUL: std::count went byte by byte (~4 % of a scan's user time).
    const char* at = a.text_.get();
    const char* const end = at + a.size_;
    while (const void* nul = std::memchr(at, '\0', static_cast<std::size_t>(end - at))) {
      ++a.count_;
      at = static_cast<const char*>(nul) + 1;
    }
    return a;
  }

  // A new text: the one shared so far is left to its other holders.
  void push_back(std::string_view arg) {
    const std::string_view was = text();
    Argv grown;
    grown.adopt(was, arg, std::string_view("\0", 1));
    grown.count_ = count_ + 1;
    *this = std::move(grown);
  }
  void clear() { *this = Argv{}; }
  [[nodiscard]] std::size_t size() const { return count_; }
  [[nodiscard]] bool empty() const { return count_ == 0; }
  [[nodiscard]] const_iterator begin() const { return const_iterator(text_.get()); }
  [[nodiscard]] const_iterator end() const { return const_iterator(text_.get() + size_); }
  [[nodiscard]] std::string_view front() const { return *begin(); }
  [[nodiscard]] std::vector<std::string> strings() const { return {begin(), end()}; }
  // The arguments as /proc/PID/cmdline gives them, each NUL-ended.
  [[nodiscard]] std::string_view text() const { return {text_.get(), size_}; }

  bool operator==(const Argv& o) const { return count_ == o.count_ && text() == o.text(); }
  friend bool operator==(const Argv& a, const std::vector<std::string>& v) {
    return a.size() == v.size() && std::equal(a.begin(), a.end(), v.begin());
  }

 private:
  // text_ becomes the pieces joined, in one allocation (the count with it).
  template <class... Pieces>
  void adopt(Pieces... pieces) {
    size_ = (pieces.size() + ...);
    auto joined = std::make_shared_for_overwrite<char[]>(size_);
    char* at = joined.get();
    ((at = std::copy(pieces.begin(), pieces.end(), at)), ...);
    text_ = std::move(joined);
  }

  std::shared_ptr<const char[]> text_;
  std::size_t size_ = 0;
  std::size_t count_ = 0;
};

// How many descriptors a process has open on one NVIDIA (or simulated) device node.
struct DeviceUse {
  std::string device;  // node name: "nvidia0", "nvidiactl", "nvidia-uvm", ...
  unsigned count = 0;
  bool operator==(const DeviceUse&) const = default;
};

struct Process {
  pid_t pid = 0;                 // in the host root's PID namespace (the /proc we read)
  pid_t tgid = 0;
  pid_t ppid = 0;
  pid_t pgrp = 0;
  pid_t session = 0;
  uid_t uid = 0;                 // real uid
  char state = '?';              // R S D Z T t X I
  std::vector<pid_t> nspid;      // NSpid: outermost first, innermost (container-local) last
  std::uint64_t start_time = 0;  // clock ticks since boot (stat field 22): identity with pid
  std::string comm;
  Argv cmdline;
  CgroupLines cgroups;
  std::vector<DeviceUse> gpu_fds;  // only devices the scan was asked to match
  // Which open file descriptions those GPU descriptors refer to, sorted, no
  // repeats: a value two processes both hold is one description they share
  // (inherited over fork, or passed over a socket). Opaque and never printed:
  // the kernel iterator gives its file objects' addresses; for the /proc walk
  // proc/file_identity numbers them with kcmp(KCMP_FILE). Empty when unknown.
  std::vector<std::uint64_t> gpu_files;
  // The GPU descriptors' numbers (in the leader's table), for kcmp.
  std::vector<int> gpu_fd_numbers;
  unsigned fd_count = 0;           // all descriptors seen
  bool fds_readable = false;       // false: /proc/<pid>/fd could not be listed (permission, race)
  std::vector<std::pair<std::string, std::string>> env;  // only keys asked for

  [[nodiscard]] pid_t local_pid() const { return nspid.empty() ? pid : nspid.back(); }
  // The arguments joined by spaces (empty ones before the first text add
  // none), or "[comm]" without argv (a kernel thread, a zombie), as ps shows it.
  [[nodiscard]] std::string command_line() const {
    if (cmdline.empty()) return "[" + comm + "]";
    std::string s;
    for (std::string_view a : cmdline) {
      if (!s.empty()) s += ' ';
      s += a;
    }
    return s;
  }
  [[nodiscard]] bool zombie() const { return state == 'Z'; }
  [[nodiscard]] unsigned gpu_fd_total() const {
    unsigned n = 0;
    for (const auto& d : gpu_fds) n += d.count;
    return n;
  }
};

}  // namespace gpureap::proc
