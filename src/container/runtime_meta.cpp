// runtime_meta: JSON and file-name parsers for the pod resolvers. JSON is
// parsed without exceptions and every field is type-checked, so a truncated
// or hand-edited state file yields nullopt instead of an exception.
#include "container/runtime_meta.hpp"

#include <nlohmann/json.hpp>

#include <string>

#include "container/cgroup_layouts.hpp"

namespace gpureap::container {
namespace {

using nlohmann::json;

json parse_json(std::string_view text) {
  return json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// obj[key] as a string, "" when obj is not an object or the value not a string.
std::string str_at(const json& obj, const char* key) {
  if (!obj.is_object()) return {};
  const auto it = obj.find(key);
  if (it == obj.end() || !it->is_string()) return {};
  return it->get<std::string>();
}

const json& member(const json& obj, const char* key) {
  static const json kNull;  // immutable sentinel, not mutable state
  if (!obj.is_object()) return kNull;
  const auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::optional<PodMeta> named_or_nothing(PodMeta m) {
  if (m.pod_name.empty() && m.container_name.empty()) return std::nullopt;
  return m;
}

// The io.kubernetes.* label set shared by CRI-O annotations, docker labels and
// crictl's status.labels.
PodMeta from_kube_labels(const json& labels, const char* source) {
  PodMeta m;
  m.pod_name = str_at(labels, "io.kubernetes.pod.name");
  m.pod_namespace = str_at(labels, "io.kubernetes.pod.namespace");
  m.pod_uid = str_at(labels, "io.kubernetes.pod.uid");
  m.container_name = str_at(labels, "io.kubernetes.container.name");
  m.source = source;
  // The sandbox has container name "POD" under dockershim/cri-dockerd and CRI-O.
  if (m.container_name == "POD") {
    m.sandbox = true;
    m.container_name.clear();
  }
  return m;
}

}  // namespace

std::optional<PodMeta> parse_containerd_spec(std::string_view text) {
  const json doc = parse_json(text);
  const json& ann = member(doc, "annotations");
  PodMeta m;
  m.pod_name = str_at(ann, "io.kubernetes.cri.sandbox-name");
  m.pod_namespace = str_at(ann, "io.kubernetes.cri.sandbox-namespace");
  m.pod_uid = str_at(ann, "io.kubernetes.cri.sandbox-uid");
  m.container_name = str_at(ann, "io.kubernetes.cri.container-name");
  m.sandbox = str_at(ann, "io.kubernetes.cri.container-type") == "sandbox";
  if (m.pod_name.empty() && m.container_name.empty()) {
    m.container_name = str_at(ann, "nerdctl/name");  // nerdctl, outside Kubernetes
  }
  m.source = "containerd";
  if (m.sandbox && !m.pod_name.empty()) return m;
  return named_or_nothing(std::move(m));
}

std::optional<PodMeta> parse_crio_config(std::string_view text) {
  const json doc = parse_json(text);
  const json& ann = member(doc, "annotations");
  PodMeta m = from_kube_labels(ann, "crio");
  if (str_at(ann, "io.kubernetes.cri-o.ContainerType") == "sandbox") {
    m.sandbox = true;
    m.container_name.clear();
  }
  if (m.sandbox && !m.pod_name.empty()) return m;
  return named_or_nothing(std::move(m));
}

std::optional<PodMeta> parse_docker_config(std::string_view text) {
  const json doc = parse_json(text);
  const json& labels = member(member(doc, "Config"), "Labels");
  PodMeta m = from_kube_labels(labels, "docker");
  if (str_at(labels, "io.kubernetes.docker.type") == "podsandbox") m.sandbox = true;
  if (m.pod_name.empty() && m.container_name.empty() && !m.sandbox) {
    std::string name = str_at(doc, "Name");  // plain docker: "/name"
    if (!name.empty() && name.front() == '/') name.erase(0, 1);
    m.container_name = std::move(name);
  }
  if (m.sandbox && !m.pod_name.empty()) return m;
  return named_or_nothing(std::move(m));
}

std::optional<PodMeta> parse_crictl_inspect(std::string_view text) {
  const json doc = parse_json(text);
  const json& status = member(doc, "status");
  PodMeta m = from_kube_labels(member(status, "labels"), "crictl");
  if (m.container_name.empty()) {
    m.container_name = str_at(member(status, "metadata"), "name");
  }
  if (m.sandbox && !m.pod_name.empty()) return m;
  return named_or_nothing(std::move(m));
}

std::optional<PodMeta> parse_container_log_name(std::string_view file, std::string_view id) {
  // "<pod>_<namespace>_<container>-<id>.log". Pod names (DNS subdomains),
  // namespaces and container names (DNS labels) never contain '_', so the two
  // underscores split it unambiguously; '-' and '.' stay inside the names.
  if (!is_container_id(id)) return std::nullopt;
  const std::string tail = "-" + std::string(id) + ".log";
  if (file.size() <= tail.size() || file.substr(file.size() - tail.size()) != tail) {
    return std::nullopt;
  }
  file.remove_suffix(tail.size());
  const std::size_t u1 = file.find('_');
  if (u1 == std::string_view::npos) return std::nullopt;
  const std::size_t u2 = file.find('_', u1 + 1);
  if (u2 == std::string_view::npos || file.find('_', u2 + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  PodMeta m;
  m.pod_name = std::string(file.substr(0, u1));
  m.pod_namespace = std::string(file.substr(u1 + 1, u2 - u1 - 1));
  m.container_name = std::string(file.substr(u2 + 1));
  m.source = "log-dir";
  if (m.pod_name.empty() || m.pod_namespace.empty() || m.container_name.empty()) return std::nullopt;
  return m;
}

std::optional<PodMeta> parse_pod_log_dir(std::string_view path) {
  // A symlink target "/var/log/pods/<ns>_<pod>_<uid>/<container>/0.log":
  // take the component after "pods/" when there is one.
  // The first "/pods/" is the log root's: a later one could be a container named "pods".
  if (const std::size_t at = path.find("/pods/"); at != std::string_view::npos) {
    std::string_view rest = path.substr(at + 6);
    const std::size_t slash = rest.find('/');
    PodMeta m;
    if (slash != std::string_view::npos) {
      std::string_view after = rest.substr(slash + 1);
      m.container_name = std::string(after.substr(0, after.find('/')));
      rest = rest.substr(0, slash);
    }
    auto base = parse_pod_log_dir(rest);
    if (!base) return std::nullopt;
    base->container_name = std::move(m.container_name);
    return base;
  }
  if (path.find('/') != std::string_view::npos) return std::nullopt;
  const std::size_t u1 = path.find('_');
  if (u1 == std::string_view::npos) return std::nullopt;
  const std::size_t u2 = path.find('_', u1 + 1);
  if (u2 == std::string_view::npos || path.find('_', u2 + 1) != std::string_view::npos) {
    return std::nullopt;
  }
  PodMeta m;
  m.pod_namespace = std::string(path.substr(0, u1));
  m.pod_name = std::string(path.substr(u1 + 1, u2 - u1 - 1));
  m.pod_uid = std::string(path.substr(u2 + 1));
  m.source = "log-dir";
  if (m.pod_name.empty() || m.pod_namespace.empty() || m.pod_uid.empty()) return std::nullopt;
  return m;
}

}  // namespace gpureap::container
