// runtime_meta: pure parsers from one runtime state file (or file name) to
// PodMeta. Kept apart from the resolvers so they are tested and fuzzed on
// captured text without a host root. All return nullopt on malformed input
// or when the text names neither a pod nor a container; none throws.
#pragma once

#include <optional>
#include <string_view>

#include "container/container_ref.hpp"

namespace gpureap::container {

// containerd OCI spec (task dir config.json): CRI annotations
// io.kubernetes.cri.{sandbox-name,sandbox-namespace,sandbox-uid,container-name,container-type};
// outside Kubernetes, nerdctl's "nerdctl/name" gives the container name.
std::optional<PodMeta> parse_containerd_spec(std::string_view json);
// CRI-O userdata/config.json: annotations io.kubernetes.pod.{name,namespace,uid},
// io.kubernetes.container.name, io.kubernetes.cri-o.ContainerType.
std::optional<PodMeta> parse_crio_config(std::string_view json);
// docker config.v2.json: .Config.Labels io.kubernetes.* (cri-dockerd/dockershim),
// else .Name for plain docker.
std::optional<PodMeta> parse_docker_config(std::string_view json);
// `crictl inspect` output: .status.labels io.kubernetes.*.
std::optional<PodMeta> parse_crictl_inspect(std::string_view json);
// A /var/log/containers entry "<pod>_<namespace>_<container>-<id>.log" for this id.
std::optional<PodMeta> parse_container_log_name(std::string_view file_name, std::string_view id);
// A /var/log/pods entry "<namespace>_<pod>_<uid>" (also a symlink target
// ".../pods/<namespace>_<pod>_<uid>/<container>/0.log": the last such component is used).
std::optional<PodMeta> parse_pod_log_dir(std::string_view dir_name);

}  // namespace gpureap::container
