#include "test_support.hpp"

#include <fcntl.h>
#include <mntent.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

extern char** environ;

namespace gpureap::testing {

namespace fs = std::filesystem;

TempDir::TempDir() {
  std::string tmpl = (fs::temp_directory_path() / "gpureap-test-XXXXXX").string();
  if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
  path_ = tmpl;
}

TempDir::~TempDir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void make_dirs(const std::string& path) { fs::create_directories(path); }

void write_file(const std::string& path, const std::string& content) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw std::runtime_error("cannot write " + path);
  out << content;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

namespace {

std::vector<char*> c_argv(const std::vector<std::string>& argv) {
  std::vector<char*> out;
  out.reserve(argv.size() + 1);
  for (const auto& a : argv) out.push_back(const_cast<char*>(a.c_str()));
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> env_with(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  for (const auto& x : extra) env.push_back(x);
  return env;
}

}  // namespace

Child Child::spawn(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error("pipe2 failed");
  auto args = c_argv(argv);
  auto env_strings = env_with(extra_env);
  auto envp = c_argv(env_strings);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    ::dup2(fds[1], STDOUT_FILENO);
    ::execve(args[0], args.data(), envp.data());
    std::_Exit(127);
  }
  ::close(fds[1]);
  Child c;
  c.pid_ = pid;
  c.out_fd_ = fds[0];
  return c;
}

Child::Child(Child&& other) noexcept
    : pid_(std::exchange(other.pid_, -1)),
      out_fd_(std::exchange(other.out_fd_, -1)),
      buffer_(std::move(other.buffer_)) {}

Child& Child::operator=(Child&& other) noexcept {
  if (this != &other) {
    kill_and_reap();
    pid_ = std::exchange(other.pid_, -1);
    out_fd_ = std::exchange(other.out_fd_, -1);
    buffer_ = std::move(other.buffer_);
  }
  return *this;
}

Child::~Child() { kill_and_reap(); }

std::optional<std::string> Child::read_line() {
  for (;;) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    char buf[4096];
    ssize_t n = ::read(out_fd_, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return std::nullopt;
    buffer_.append(buf, static_cast<std::size_t>(n));
  }
}

void Child::kill_and_reap() {
  if (pid_ > 0) {
    ::kill(pid_, SIGKILL);
    int status = 0;
    while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    pid_ = -1;
  }
  if (out_fd_ >= 0) {
    ::close(out_fd_);
    out_fd_ = -1;
  }
}

int Child::wait_exit() {
  int status = 0;
  while (::waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
  return status;
}

RunResult run(const std::vector<std::string>& argv, const std::vector<std::string>& extra_env) {
  TempDir tmp;
  const std::string out_path = tmp / "out";
  const std::string err_path = tmp / "err";
  auto args = c_argv(argv);
  auto env_strings = env_with(extra_env);
  auto envp = c_argv(env_strings);
  pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork failed");
  if (pid == 0) {
    int o = ::open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    int e = ::open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(o, STDOUT_FILENO);
    ::dup2(e, STDERR_FILENO);
    ::execve(args[0], args.data(), envp.data());
    std::_Exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  RunResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  return r;
}

Cgroup::Cgroup(std::string mount, std::string path) : mount_(std::move(mount)), path_(std::move(path)) {
  fs::path p(mount_);
  fs::path rel = fs::path(path_).relative_path();
  for (const auto& part : rel) {
    p /= part;
    if (!fs::exists(p)) {
      fs::create_directory(p);
      created_.push_back(p.string());
    }
  }
}

Cgroup::~Cgroup() {
  for (auto it = created_.rbegin(); it != created_.rend(); ++it) ::rmdir(it->c_str());
}

void Cgroup::add(pid_t pid) const {
  const std::string procs = mount_ + path_ + "/cgroup.procs";
  std::ofstream out(procs);
  out << pid << "\n";
  out.flush();
  if (!out) throw std::runtime_error("cannot move pid into " + procs);
}

std::optional<std::string> cgroup_v1_memory_mount() {
  std::optional<std::string> found;
  FILE* f = ::setmntent("/proc/self/mounts", "r");
  if (f == nullptr) return found;
  while (mntent* m = ::getmntent(f)) {
    if (std::strcmp(m->mnt_type, "cgroup") == 0 && ::hasmntopt(m, "memory") != nullptr) {
      found = m->mnt_dir;
      break;
    }
  }
  ::endmntent(f);
  return found;
}

std::optional<std::string> cgroup_v2_mount() {
  std::optional<std::string> found;
  FILE* f = ::setmntent("/proc/self/mounts", "r");
  if (f == nullptr) return found;
  while (mntent* m = ::getmntent(f)) {
    if (std::strcmp(m->mnt_type, "cgroup2") == 0) {
      found = m->mnt_dir;
      break;
    }
  }
  ::endmntent(f);
  return found;
}

std::string random_hex(std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::mt19937_64 gen(rd());
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s.push_back(kHex[gen() % 16]);
  return s;
}

std::string random_uuid() {
  std::string h = random_hex(32);
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

}  // namespace gpureap::testing
