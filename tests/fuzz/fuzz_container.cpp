// libFuzzer target for the container and GPU-snapshot parsers: cgroup paths,
// runtime state JSON (containerd, CRI-O, docker, crictl), kubelet log names,
// and the GPU snapshot JSON that `--gpu json:FILE` replays. The first byte
// picks the parser. They promise never to crash or throw; results are checked
// for the invariants they document.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "container/cgroup_layouts.hpp"
#include "container/runtime_meta.hpp"
#include "gpu/snapshot_json.hpp"
#include "proc/parse.hpp"

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

void check_ref(const std::optional<gpureap::container::ContainerRef>& ref) {
  if (ref) check(gpureap::container::is_container_id(ref->id));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return 0;
  using namespace gpureap::container;
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  switch (data[0] % 8) {
    case 0:
      check_ref(parse_container_path(text));
      break;
    case 1:
      check_ref(container_from_cgroups(gpureap::proc::parse_cgroup(text)));
      break;
    case 2:
      (void)parse_containerd_spec(text);
      break;
    case 3:
      (void)parse_crio_config(text);
      break;
    case 4:
      (void)parse_docker_config(text);
      break;
    case 5:
      (void)parse_crictl_inspect(text);
      break;
    case 6: {
      const auto slash = text.find('/');
      if (slash != std::string_view::npos) {
        (void)parse_container_log_name(text.substr(0, slash), text.substr(slash + 1));
      }
      (void)parse_pod_log_dir(text);
      break;
    }
    default: {
      auto snap = gpureap::gpu::snapshot_from_json_text(text, "fuzz.json");
      if (snap) {
        // What parses must print and parse back to the same snapshot.
        auto again = gpureap::gpu::snapshot_from_json_text(gpureap::gpu::snapshot_to_json_text(*snap),
                                                           "again.json");
        check(again.ok() && *again == *snap);
      }
      break;
    }
  }
  return 0;
}
