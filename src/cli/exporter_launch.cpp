// gpureap exporter: the exporter is a program of its own, gpureap-exporter,
// installed beside gpureap, so that no other subcommand maps its libraries
// (src/cli/CMakeLists.txt says why). This subcommand execs it with the
// arguments it was given: the PID, the environment, the signal mask and the
// descriptors stay the caller's, as a service manager or a kubelet expects.
#include <fmt/format.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <climits>
#include <cstring>
#include <string>
#include <vector>

#include "cli/commands.hpp"
#include "cli/common.hpp"

namespace gpureap::cli {

namespace {

constexpr const char* kExporterProgram = "gpureap-exporter";

// gpureap-exporter in the directory of the running gpureap (symbolic links
// resolved, as the kernel resolved them to run it). Empty with `why` set when
// /proc/self/exe cannot be read.
std::string exporter_path(std::string& why) {
  std::array<char, PATH_MAX> self{};
  const ssize_t n = ::readlink("/proc/self/exe", self.data(), self.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= self.size()) {
    why = fmt::format("cannot find {}: readlink /proc/self/exe: {}", kExporterProgram,
                      n < 0 ? std::strerror(errno) : "no usable path");
    return {};
  }
  std::string path(self.data(), static_cast<std::size_t>(n));
  path.erase(path.rfind('/') + 1);
  return path + kExporterProgram;
}

int exec_exporter(const std::vector<std::string>& args) {
  std::string why;
  const std::string path = exporter_path(why);
  if (path.empty()) {
    log_error("exporter: " + why);
    return kExitCouldNotCheck;
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 2);
  // argv[0] is the program's path: ps and /proc/PID/cmdline show what runs.
  // execv takes char*; it copies the strings and never writes them.
  argv.push_back(const_cast<char*>(path.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  for (const auto& a : args)
    argv.push_back(const_cast<char*>(a.c_str()));  // NOLINT(cppcoreguidelines-pro-type-const-cast)
  argv.push_back(nullptr);
  ::execv(path.c_str(), argv.data());
  log_error(fmt::format(
      "exporter: cannot run {}: {} (the exporter is the program {}, installed beside gpureap)",
      path, std::strerror(errno), kExporterProgram));
  return kExitCouldNotCheck;
}

}  // namespace

void register_exporter_launcher(CLI::App& app, std::function<int()>& run) {
  CLI::App* cmd = app.add_subcommand("exporter",
                                     "Prometheus exporter: scan the node every --interval, serve "
                                     "/metrics, /healthz (and /snapshot); "
                                     "runs gpureap-exporter (its flags: gpureap exporter --help)");
  // Every argument, --help included, is gpureap-exporter's to parse.
  cmd->set_help_flag();
  cmd->prefix_command();
  cmd->callback([cmd, &run] { run = [args = cmd->remaining()] { return exec_exporter(args); }; });
}

}  // namespace gpureap::cli
