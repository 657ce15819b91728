#include "lab/runtime.hpp"

namespace gpureap::lab {

std::string containerd_task_dir(const std::string& node_root, const std::string& container_id) {
  return node_root + "/run/containerd/io.containerd.runtime.v2.task/k8s.io/" + container_id;
}

nlohmann::json cri_annotations(const ContainerSpec& spec) {
  return {{"io.kubernetes.cri.container-type", "container"},
          {"io.kubernetes.cri.sandbox-name", spec.pod},
          {"io.kubernetes.cri.sandbox-namespace", spec.pod_namespace},
          {"io.kubernetes.cri.sandbox-uid", spec.pod_uid},
          {"io.kubernetes.cri.container-name", spec.container_name}};
}

}  // namespace gpureap::lab
