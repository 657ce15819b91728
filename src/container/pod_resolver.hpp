// pod_resolver: pod metadata without the API server. One small interface,
// one resolver per source of runtime state (containerd, CRI-O, docker, crictl,
// kubelet log dirs), one factory that fixes their order; the first resolver
// that answers wins. Every resolver reads under the host root and returns
// nullopt (never throws) on missing or malformed state. Resolvers hold no
// mutable state, so one set may be shared by scanning threads.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "container/container_ref.hpp"
#include "sys/host_root.hpp"

namespace gpureap::container {

class PodResolver {
 public:
  PodResolver() = default;
  PodResolver(const PodResolver&) = delete;
  PodResolver& operator=(const PodResolver&) = delete;
  virtual ~PodResolver();
  // The value put in PodMeta::source: "containerd", "crio", "docker", "crictl", "log-dir".
  [[nodiscard]] virtual std::string_view name() const = 0;
  // Metadata for the container, or nullopt when this source does not know it.
  [[nodiscard]] virtual std::optional<PodMeta> resolve(const ContainerRef& ref) const = 0;
  // False for sources that outlive the container (kubelet log dirs): an answer
  // from them does not prove the runtime still has the container.
  [[nodiscard]] virtual bool proves_live_state() const { return true; }
};

using Resolvers = std::vector<std::unique_ptr<PodResolver>>;

struct ResolverOptions {
  // crictl is used only when an executable is found: this path when set (tests
  // point it at a fake script), else "crictl" searched on `search_path`.
  std::string crictl_path;
  // The PATH to search; nullopt: the process's $PATH as the factory sees it.
  std::optional<std::string> search_path;
  bool use_crictl = true;
  // A hung runtime socket must not hang a scan: crictl is killed after this.
  std::chrono::milliseconds crictl_timeout{3000};
  // crictl --runtime-endpoint. Empty: crictl's own default when the host root
  // is "/", else the first known CRI socket found under the host root.
  std::string crictl_endpoint;
};

// Each resolver on its own (tests; callers wanting a custom order).
std::unique_ptr<PodResolver> make_containerd_resolver(sys::HostRoot root);
std::unique_ptr<PodResolver> make_crio_resolver(sys::HostRoot root);
std::unique_ptr<PodResolver> make_docker_resolver(sys::HostRoot root);
std::unique_ptr<PodResolver> make_log_dir_resolver(sys::HostRoot root);
// argv0 must be an executable path; `endpoint` may be empty.
std::unique_ptr<PodResolver> make_crictl_resolver(std::string argv0, std::string endpoint,
                                                  std::chrono::milliseconds timeout);

// Finds an executable named `name` on a ':'-separated search path ("" if none).
std::string find_executable(std::string_view name, std::string_view search_path);

// The order: runtime state files (cheap, exact) first — containerd, crio,
// docker —, then crictl (a subprocess; only when found), then the kubelet log
// dirs (they survive the container, so they come last).
Resolvers default_resolvers(const sys::HostRoot& root, const ResolverOptions& options);

// Asks the resolvers in order; first hit wins. deleted = no resolver that
// proves live state answered. ref.pod_uid (from the cgroup path) fills a
// missing meta->pod_uid, and is what a deleted container still reports.
ContainerInfo resolve_container(const ContainerRef& ref, const Resolvers& resolvers);

}  // namespace gpureap::container
