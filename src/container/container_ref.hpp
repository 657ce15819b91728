// What a cgroup path says about a container, and what the runtime's state says
// about its pod. ContainerRef comes from a pure parse of one cgroup path;
// PodMeta comes from a resolver that reads runtime files under the host root.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace gpureap::container {

enum class Runtime { containerd, crio, docker, nerdctl, unknown };
enum class Qos { guaranteed, burstable, besteffort, none };

std::string_view to_string(Runtime r);
std::string_view to_string(Qos q);

struct ContainerRef {
  std::string id;       // 64 hex
  Runtime runtime = Runtime::unknown;
  std::string pod_uid;  // with '-' (converted from the systemd form's '_'); empty outside k8s
  Qos qos = Qos::none;  // none: not under kubepods
  bool operator==(const ContainerRef&) const = default;
};

struct PodMeta {
  std::string pod_name;
  std::string pod_namespace;
  std::string pod_uid;
  std::string container_name;
  std::string source;  // which resolver answered: "containerd", "crio", "docker", "log-dir", "crictl"
  bool sandbox = false;  // the pod's sandbox ("pause"/infra) container, not a workload
  bool operator==(const PodMeta&) const = default;
};

struct ContainerInfo {
  ContainerRef ref;
  std::optional<PodMeta> meta;
  bool deleted = false;  // the runtime no longer has the container's state
};

}  // namespace gpureap::container
