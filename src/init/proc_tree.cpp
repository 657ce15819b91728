#include "init/proc_tree.hpp"

#include "init/pidfd.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace gpureap::init {

namespace {

constexpr unsigned kNvidiaMajor = 195;

// Reads a whole (small) file relative to `dir_fd` into buf, NUL-terminated.
// ENOENT/ESRCH (process gone) and EACCES are the normal failures.
bool read_small(int dir_fd, const char* path, char* buf, size_t cap) {
  int fd = ::openat(dir_fd, path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  size_t len = 0;
  while (len + 1 < cap) {
    ssize_t n = ::read(fd, buf + len, cap - 1 - len);
    if (n < 0) {
      if (errno == EINTR) continue;
      break;  // ESRCH: exited while we read
    }
    if (n == 0) break;
    len += static_cast<size_t>(n);
  }
  ::close(fd);
  buf[len] = '\0';
  return len > 0;
}

bool parse_long(const char*& p, long long& out) {
  while (*p == ' ') ++p;
  bool neg = *p == '-';
  if (neg) ++p;
  if (*p < '0' || *p > '9') return false;
  long long v = 0;
  for (; *p >= '0' && *p <= '9'; ++p) v = v * 10 + (*p - '0');
  out = neg ? -v : v;
  return true;
}

bool starts_with(const char* s, const char* prefix) { return std::strncmp(s, prefix, std::strlen(prefix)) == 0; }

const ProcEntry* find_pid(const Vec<ProcEntry>& sorted, pid_t pid) {
  size_t lo = 0;
  size_t hi = sorted.size();
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (sorted[mid].pid == pid) return &sorted[mid];
    if (sorted[mid].pid < pid) lo = mid + 1; else hi = mid;
  }
  return nullptr;
}

}  // namespace

bool parse_stat_line(const char* text, ProcEntry& e) {
  // "pid (comm) S ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
  //  utime stime cutime cstime priority nice threads itrealvalue starttime ..."
  // comm may hold spaces and ')': it ends at the last ')'.
  const char* open = std::strchr(text, '(');
  const char* close = std::strrchr(text, ')');
  if (open == nullptr || close == nullptr || close < open) return false;
  const char* p = text;
  long long v = 0;
  if (!parse_long(p, v)) return false;
  e.pid = static_cast<pid_t>(v);
  size_t comm_len = static_cast<size_t>(close - open - 1);
  if (comm_len > sizeof e.comm - 1) comm_len = sizeof e.comm - 1;
  for (size_t i = 0; i < comm_len; ++i) {
    char ch = open[1 + i];
    e.comm[i] = ch > ' ' && ch < 127 ? ch : '?';  // comm is the process's to choose: never let it forge log lines
  }
  e.comm[comm_len] = '\0';
  p = close + 1;
  while (*p == ' ') ++p;
  if (*p == '\0') return false;
  e.state = *p++;
  long long field[20] = {};
  // fields 4 (ppid) .. 22 (starttime)
  for (int i = 4; i <= 22; ++i) {
    if (!parse_long(p, field[i - 4])) return false;
  }
  e.ppid = static_cast<pid_t>(field[0]);
  e.pgrp = static_cast<pid_t>(field[1]);
  e.start = static_cast<uint64_t>(field[18]);
  return true;
}

pid_t parse_nspid(const char* status_text, int index, int* count) {
  const char* line = std::strstr(status_text, "\nNSpid:");
  if (count != nullptr) *count = 0;
  if (line == nullptr) return 0;
  const char* p = line + 7;
  pid_t found = 0;
  int n = 0;
  long long v = 0;
  while (*p != '\n' && *p != '\0') {
    while (*p == ' ' || *p == '\t') ++p;
    if (*p == '\n' || *p == '\0' || !parse_long(p, v)) break;
    if (n == index) found = static_cast<pid_t>(v);
    ++n;
  }
  if (count != nullptr) *count = n;
  return found;
}

ProcView::~ProcView() {
  if (proc_fd_ >= 0) ::close(proc_fd_);
}

bool ProcView::open(const Log& log) {
  proc_fd_ = ::open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (proc_fd_ < 0) {
    log.print(Level::kWarn, "cannot open /proc (%s): only the main child will be signalled at shutdown",
              errno_name(errno));
    return false;
  }
  char buf[4096];
  ssize_t n = ::readlinkat(proc_fd_, "self", buf, sizeof buf - 1);
  if (n <= 0) {
    // ENOENT: this /proc belongs to a PID namespace that does not contain us.
    log.print(Level::kWarn, "/proc has no 'self' for us (%s): only the main child will be signalled at shutdown",
              n < 0 ? errno_name(errno) : "empty");
    ::close(proc_fd_);
    proc_fd_ = -1;
    return false;
  }
  buf[n] = '\0';
  self_ = static_cast<pid_t>(std::atol(buf));
  int count = 0;
  if (read_small(proc_fd_, "self/status", buf, sizeof buf)) parse_nspid(buf, 0, &count);
  nspid_index_ = count > 1 ? count - 1 : 0;
  if (nspid_index_ > 0) {
    log.print(Level::kDebug, "/proc belongs to an ancestor PID namespace; translating pids through NSpid");
  }
  return true;
}

bool ProcView::read_stat(pid_t pid, ProcEntry& e) const {
  char path[32];
  std::snprintf(path, sizeof path, "%d/stat", static_cast<int>(pid));
  char buf[1024];
  if (!read_small(proc_fd_, path, buf, sizeof buf)) return false;
  return parse_stat_line(buf, e) && e.pid == pid;
}

pid_t ProcView::read_nspid(pid_t pid) const {
  if (nspid_index_ == 0) return pid;
  char path[32];
  std::snprintf(path, sizeof path, "%d/status", static_cast<int>(pid));
  char buf[4096];
  if (!read_small(proc_fd_, path, buf, sizeof buf)) return 0;
  return parse_nspid(buf, nspid_index_, nullptr);
}

bool ProcView::scan(Vec<ProcEntry>& out) const {
  out.clear();
  if (proc_fd_ < 0) return false;
  int dir_fd = ::openat(proc_fd_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return false;
  DIR* dir = ::fdopendir(dir_fd);
  if (dir == nullptr) {
    ::close(dir_fd);
    return false;
  }
  // Every process. proc_pid_readdir lists pids in ascending order; sort only if not.
  Vec<ProcEntry> all;
  bool sorted = true;
  while (dirent* d = ::readdir(dir)) {
    if (d->d_name[0] < '0' || d->d_name[0] > '9') continue;
    ProcEntry e;
    if (!read_stat(static_cast<pid_t>(std::atol(d->d_name)), e)) continue;  // exited meanwhile
    if (!all.empty() && all[all.size() - 1].pid >= e.pid) sorted = false;
    all.push(e);
  }
  ::closedir(dir);
  if (!sorted) {
    std::qsort(all.begin(), all.size(), sizeof(ProcEntry), [](const void* a, const void* b) {
      pid_t pa = static_cast<const ProcEntry*>(a)->pid;
      pid_t pb = static_cast<const ProcEntry*>(b)->pid;
      return (pa > pb) - (pa < pb);
    });
  }
  // Descendants: closure over PPid starting from ourselves; each pass adds
  // everything whose parent is already in.
  Vec<char> in;
  for (size_t i = 0; i < all.size(); ++i) in.push(all[i].pid == self_ ? 1 : 0);
  if (in.size() != all.size()) return false;
  for (bool grew = true; grew;) {
    grew = false;
    for (size_t i = 0; i < all.size(); ++i) {
      if (in[i] != 0) continue;
      const ProcEntry* parent = find_pid(all, all[i].ppid);
      if (parent == nullptr) continue;
      if (in[static_cast<size_t>(parent - all.begin())] != 0) {
        in[i] = 1;
        grew = true;
      }
    }
  }
  for (size_t i = 0; i < all.size(); ++i) {
    if (in[i] == 0 || all[i].pid == self_) continue;
    ProcEntry e = all[i];
    e.nspid = read_nspid(e.pid);
    if (e.nspid <= 0) continue;  // exited meanwhile
    out.push(e);
  }
  return true;
}

int ProcView::open_verified(const ProcEntry& e, const Vec<ProcEntry>& scanned, const Log& log) const {
  // Belt and braces: a descendant is never PID 1 of any namespace we can see (that is us, or the host's init).
  if (e.pid <= 1 || e.nspid <= 1 || e.pid == self_) return -1;
  int fd = pidfd_open(e.nspid);
  if (fd < 0) {
    // ESRCH: gone (and reaped) since the scan.
    if (errno != ESRCH) log.print(Level::kWarn, "pidfd_open(%d): %s", static_cast<int>(e.nspid), errno_name(errno));
    return -1;
  }
  // The pidfd names whoever owns nspid now. If the scanned process is still
  // alive with the same start time, nobody can own its pid but it.
  ProcEntry now;
  bool same = read_stat(e.pid, now) && now.start == e.start &&
              (now.ppid == self_ || find_pid(scanned, now.ppid) != nullptr);
  if (!same || (nspid_index_ != 0 && read_nspid(e.pid) != e.nspid)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

bool ProcView::holds_gpu(pid_t pid, const Config& cfg) const {
  if (proc_fd_ < 0) return false;
  char path[32];
  std::snprintf(path, sizeof path, "%d/fd", static_cast<int>(pid));
  int dir_fd = ::openat(proc_fd_, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return false;  // ENOENT/ESRCH: gone; EACCES: not ours to read
  DIR* dir = ::fdopendir(dir_fd);
  if (dir == nullptr) {
    ::close(dir_fd);
    return false;
  }
  bool gpu = false;
  char target[4096];
  while (!gpu) {
    dirent* d = ::readdir(dir);
    if (d == nullptr) break;
    if (d->d_name[0] == '.') continue;
    ssize_t n = ::readlinkat(dirfd(dir), d->d_name, target, sizeof target - 1);
    if (n <= 0) continue;  // ENOENT: closed meanwhile
    target[n] = '\0';
    if (starts_with(target, "/dev/nvidia")) {
      gpu = true;
      break;
    }
    for (int i = 0; i < cfg.gpu_prefix_count; ++i) {
      if (starts_with(target, cfg.gpu_prefixes[i])) gpu = true;
    }
    if (!gpu && starts_with(target, "/dev/")) {
      struct stat st {};
      if (::fstatat(dirfd(dir), d->d_name, &st, 0) == 0 && S_ISCHR(st.st_mode) && major(st.st_rdev) == kNvidiaMajor) {
        gpu = true;
      }
    }
  }
  ::closedir(dir);
  return gpu;
}

}  // namespace gpureap::init
