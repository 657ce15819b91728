// trace_context_helper: the processes of issue 12's context cases, on the
// simulated GPU ($GPUREAP_SIM_DIR). Prints one JSON line when ready, then
// pauses until killed (the test kills every process it made, by pidfd).
//
//   fork-children N BYTES [--group-leader]
//       Creates a context of BYTES on device 0, forks N children that inherit
//       its descriptors and mappings (a preforking server's workers), prints
//       {"pid": P, "children": [C1, ...]}. --group-leader: the creator leads
//       its own process group first, so the children keep its group.
//   driver-client
//       Opens device 0's files itself and maps nothing, as an NVML client
//       (a pynvml monitor) does; prints {"pid": P}.
#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gpu/sim_client.hpp"

namespace {

namespace sim = gpureap::gpu::sim;

[[noreturn]] void pause_forever() {
  for (;;) ::pause();
}

int fail(const std::string& what) {
  (void)std::fprintf(stderr, "trace_context_helper: %s\n", what.c_str());
  return 1;
}

int fork_children(unsigned count, std::uint64_t bytes, bool group_leader) {
  if (group_leader && ::setpgid(0, 0) != 0)
    return fail(std::string("setpgid: ") + std::strerror(errno));
  const std::string dir = sim::resolve_sim_dir(std::nullopt, "/");
  if (auto st = sim::init_sim_dir(dir, sim::default_config(1)); !st)
    return fail(st.error().message);
  auto ctx = sim::create_context(dir, 0, bytes);
  if (!ctx) return fail(ctx.error().message);
  std::string children;
  for (unsigned i = 0; i < count; ++i) {
    const pid_t c = ::fork();
    if (c < 0) return fail(std::string("fork: ") + std::strerror(errno));
    if (c == 0) pause_forever();  // holds the inherited context
    if (i > 0) children += ',';
    children += std::to_string(c);
  }
  if (std::printf("{\"pid\":%d,\"children\":[%s]}\n", ::getpid(), children.c_str()) < 0 ||
      std::fflush(stdout) != 0) {
    return fail("cannot write the ready line");
  }
  pause_forever();
}

int driver_client() {
  const std::string dir = sim::resolve_sim_dir(std::nullopt, "/");
  for (const char* name : {"nvidia0", "nvidiactl", "nvidia-uvm"}) {
    const std::string path = dir + "/dev/" + name;
    if (::open(path.c_str(), O_RDWR | O_CLOEXEC) < 0) {
      return fail("open " + path + ": " + std::strerror(errno));
    }
  }
  if (std::printf("{\"pid\":%d}\n", ::getpid()) < 0 || std::fflush(stdout) != 0) {
    return fail("cannot write the ready line");
  }
  pause_forever();
}

}  // namespace

int main(int argc, char** argv) {
  const std::vector<std::string_view> args(argv + 1, argv + argc);
  if (args.size() >= 3 && args[0] == "fork-children") {
    const bool leader = args.size() >= 4 && args[3] == "--group-leader";
    return fork_children(static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)),
                         std::strtoull(argv[3], nullptr, 10), leader);
  }
  if (args.size() == 1 && args[0] == "driver-client") return driver_client();
  return fail("usage: trace_context_helper fork-children N BYTES [--group-leader] | driver-client");
}
