// container_ref: names of the shared enums, as printed in tables and JSON.
#include "container/container_ref.hpp"

namespace gpureap::container {

std::string_view to_string(Runtime r) {
  switch (r) {
    case Runtime::containerd: return "containerd";
    case Runtime::crio: return "crio";
    case Runtime::docker: return "docker";
    case Runtime::nerdctl: return "nerdctl";
    case Runtime::unknown: break;
  }
  return "unknown";
}

std::string_view to_string(Qos q) {
  switch (q) {
    case Qos::guaranteed: return "guaranteed";
    case Qos::burstable: return "burstable";
    case Qos::besteffort: return "besteffort";
    case Qos::none: break;
  }
  return "none";
}

}  // namespace gpureap::container
