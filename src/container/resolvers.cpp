// resolvers: the PodResolver implementations (one per source), the factory
// that orders them, and resolve_container. Reading lives here; turning the
// bytes into PodMeta is runtime_meta's pure parsers.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdlib>
#include <exception>
#include <utility>

#include "container/pod_resolver.hpp"
#include "container/run_capture.hpp"
#include "container/runtime_meta.hpp"
#include "sys/dir.hpp"

namespace gpureap::container {

PodResolver::~PodResolver() = default;

namespace {

std::string strip_slash(std::string_view rel) {
  while (!rel.empty() && rel.front() == '/') rel.remove_prefix(1);
  return rel.empty() ? std::string(".") : std::string(rel);
}

// Sorted entry names of a directory under the root; empty when unreadable.
std::vector<std::string> list_dir(const sys::HostRoot& root, std::string_view rel) {
  return sys::entry_names(root.dir_fd(), strip_slash(rel).c_str());
}

std::optional<std::string> read_link(const sys::HostRoot& root, std::string_view rel) {
  const std::string r = strip_slash(rel);
  std::array<char, PATH_MAX> buf{};
  const ssize_t n = ::readlinkat(root.dir_fd(), r.c_str(), buf.data(), buf.size());
  if (n <= 0 || static_cast<std::size_t>(n) >= buf.size()) return std::nullopt;
  return std::string(buf.data(), static_cast<std::size_t>(n));
}

bool is_dir(const sys::HostRoot& root, std::string_view rel) {
  const std::string r = strip_slash(rel);
  struct stat st {};
  return ::fstatat(root.dir_fd(), r.c_str(), &st, 0) == 0 && S_ISDIR(st.st_mode);
}

// Reads one file and hands it to a parser; any failure (missing, unreadable,
// malformed, or an exception such as bad_alloc) is "not known here".
template <class Parser>
std::optional<PodMeta> parse_file(const sys::HostRoot& root, const std::string& rel, Parser parse) {
  const auto text = root.read_file(rel);
  if (!text.ok()) return std::nullopt;
  return parse(*text);
}

class ContainerdResolver final : public PodResolver {
 public:
  explicit ContainerdResolver(sys::HostRoot root) : root_(std::move(root)) {}
  std::string_view name() const override { return "containerd"; }
  std::optional<PodMeta> resolve(const ContainerRef& ref) const override try {
    // containerd's state dir, and k3s/rke2's embedded containerd's.
    static constexpr std::array<std::string_view, 2> kTaskRoots{
        "run/containerd/io.containerd.runtime.v2.task",
        "run/k3s/containerd/io.containerd.runtime.v2.task"};
    for (const auto tasks : kTaskRoots) {
      // Kubernetes' namespace first (the common case, one lookup), then the
      // others present: "moby" (docker's), "default" (nerdctl, ctr), custom ones.
      std::vector<std::string> namespaces{"k8s.io"};
      for (auto& ns : list_dir(root_, tasks)) {
        if (ns != "k8s.io") namespaces.push_back(std::move(ns));
      }
      for (const auto& ns : namespaces) {
        const std::string rel = std::string(tasks) + "/" + ns + "/" + ref.id + "/config.json";
        if (auto m = parse_file(root_, rel, parse_containerd_spec)) return m;
      }
    }
    return std::nullopt;
  } catch (const std::exception&) {
    return std::nullopt;
  }

 private:
  sys::HostRoot root_;
};

class CrioResolver final : public PodResolver {
 public:
  explicit CrioResolver(sys::HostRoot root) : root_(std::move(root)) {}
  std::string_view name() const override { return "crio"; }
  std::optional<PodMeta> resolve(const ContainerRef& ref) const override try {
    return parse_file(root_,
                      "run/containers/storage/overlay-containers/" + ref.id + "/userdata/config.json",
                      parse_crio_config);
  } catch (const std::exception&) {
    return std::nullopt;
  }

 private:
  sys::HostRoot root_;
};

class DockerResolver final : public PodResolver {
 public:
  explicit DockerResolver(sys::HostRoot root) : root_(std::move(root)) {}
  std::string_view name() const override { return "docker"; }
  std::optional<PodMeta> resolve(const ContainerRef& ref) const override try {
    return parse_file(root_, "var/lib/docker/containers/" + ref.id + "/config.v2.json",
                      parse_docker_config);
  } catch (const std::exception&) {
    return std::nullopt;
  }

 private:
  sys::HostRoot root_;
};

// kubelet's log dirs: they outlive the container until the pod is cleaned up,
// so they name a dead container's pod but do not prove it is alive.
class LogDirResolver final : public PodResolver {
 public:
  explicit LogDirResolver(sys::HostRoot root) : root_(std::move(root)) {}
  std::string_view name() const override { return "log-dir"; }
  bool proves_live_state() const override { return false; }
  std::optional<PodMeta> resolve(const ContainerRef& ref) const override try {
    if (auto m = from_container_logs(ref)) return m;
    return from_pod_logs(ref);
  } catch (const std::exception&) {
    return std::nullopt;
  }

 private:
  // var/log/containers/<pod>_<ns>_<container>-<ID>.log: the name carries the
  // ID; the symlink target (var/log/pods/<ns>_<pod>_<uid>/...) adds the UID.
  std::optional<PodMeta> from_container_logs(const ContainerRef& ref) const {
    for (const auto& file : list_dir(root_, "var/log/containers")) {
      auto m = parse_container_log_name(file, ref.id);
      if (!m) continue;
      if (auto target = read_link(root_, "var/log/containers/" + file)) {
        if (auto pod = parse_pod_log_dir(*target);
            pod && pod->pod_name == m->pod_name && pod->pod_namespace == m->pod_namespace) {
          m->pod_uid = pod->pod_uid;
        }
      }
      return m;
    }
    return std::nullopt;
  }

  // var/log/pods/<ns>_<pod>_<uid>/<container>/ by the UID from the cgroup
  // path. The container is named only when the pod has a single one: the log
  // files themselves do not carry container IDs.
  std::optional<PodMeta> from_pod_logs(const ContainerRef& ref) const {
    if (ref.pod_uid.empty()) return std::nullopt;
    const std::string suffix = "_" + ref.pod_uid;
    for (const auto& dir : list_dir(root_, "var/log/pods")) {
      if (dir.size() <= suffix.size() || dir.compare(dir.size() - suffix.size(), suffix.size(), suffix) != 0) {
        continue;
      }
      auto m = parse_pod_log_dir(dir);
      if (!m || m->pod_uid != ref.pod_uid) continue;
      std::vector<std::string> containers;
      const std::string pod_dir = "var/log/pods/" + dir;
      for (auto& c : list_dir(root_, pod_dir)) {
        if (is_dir(root_, std::string(pod_dir).append("/").append(c)))
          containers.push_back(std::move(c));
      }
      if (containers.size() == 1) m->container_name = containers.front();
      return m;
    }
    return std::nullopt;
  }

  sys::HostRoot root_;
};

class CrictlResolver final : public PodResolver {
 public:
  CrictlResolver(std::string argv0, std::string endpoint, std::chrono::milliseconds timeout)
      : argv0_(std::move(argv0)), endpoint_(std::move(endpoint)), timeout_(timeout) {}
  std::string_view name() const override { return "crictl"; }
  std::optional<PodMeta> resolve(const ContainerRef& ref) const override try {
    std::vector<std::string> argv{argv0_};
    if (!endpoint_.empty()) {
      argv.emplace_back("--runtime-endpoint");
      argv.push_back(endpoint_);
    }
    argv.insert(argv.end(), {"inspect", "-o", "json", ref.id});
    auto cap = run_capture(argv, timeout_);
    if (!cap.ok() || cap->exit_code != 0) return std::nullopt;
    return parse_crictl_inspect(cap->out);
  } catch (const std::exception&) {
    return std::nullopt;
  }

 private:
  std::string argv0_;
  std::string endpoint_;
  std::chrono::milliseconds timeout_;
};

bool is_executable_file(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(path.c_str(), X_OK) == 0;
}

// With a host root other than "/", crictl's default sockets are the
// container's, not the host's: point it at the host's CRI socket.
std::string endpoint_under_root(const sys::HostRoot& root) {
  static constexpr std::array<std::string_view, 5> kSockets{
      "run/containerd/containerd.sock", "run/crio/crio.sock", "run/cri-dockerd.sock",
      "var/run/cri-dockerd.sock", "run/k3s/containerd/containerd.sock"};
  for (const auto s : kSockets) {
    if (root.exists(s)) return "unix://" + root.join(s);
  }
  return {};
}

}  // namespace

std::unique_ptr<PodResolver> make_containerd_resolver(sys::HostRoot root) {
  return std::make_unique<ContainerdResolver>(std::move(root));
}
std::unique_ptr<PodResolver> make_crio_resolver(sys::HostRoot root) {
  return std::make_unique<CrioResolver>(std::move(root));
}
std::unique_ptr<PodResolver> make_docker_resolver(sys::HostRoot root) {
  return std::make_unique<DockerResolver>(std::move(root));
}
std::unique_ptr<PodResolver> make_log_dir_resolver(sys::HostRoot root) {
  return std::make_unique<LogDirResolver>(std::move(root));
}
std::unique_ptr<PodResolver> make_crictl_resolver(std::string argv0, std::string endpoint,
                                                  std::chrono::milliseconds timeout) {
  return std::make_unique<CrictlResolver>(std::move(argv0), std::move(endpoint), timeout);
}

std::string find_executable(std::string_view name, std::string_view search_path) {
  while (!search_path.empty()) {
    const std::size_t colon = search_path.find(':');
    const std::string_view dir = search_path.substr(0, colon);
    // An empty PATH entry means "." to a shell; a node tool should not run
    // whatever crictl sits in its working directory, so empty entries are skipped.
    if (!dir.empty()) {
      std::string candidate(dir);
      candidate.push_back('/');
      candidate.append(name);
      if (is_executable_file(candidate)) return candidate;
    }
    if (colon == std::string_view::npos) break;
    search_path.remove_prefix(colon + 1);
  }
  return {};
}

Resolvers default_resolvers(const sys::HostRoot& root, const ResolverOptions& options) {
  Resolvers out;
  out.push_back(make_containerd_resolver(root));
  out.push_back(make_crio_resolver(root));
  out.push_back(make_docker_resolver(root));
  if (options.use_crictl) {
    std::string exe;
    if (!options.crictl_path.empty()) {
      if (is_executable_file(options.crictl_path)) exe = options.crictl_path;
    } else {
      std::string path = options.search_path.value_or("");
      if (!options.search_path) {
        if (const char* env = std::getenv("PATH"); env != nullptr) path = env;
      }
      exe = find_executable("crictl", path);
    }
    if (!exe.empty()) {
      std::string endpoint = options.crictl_endpoint;
      if (endpoint.empty() && !root.is_slash()) endpoint = endpoint_under_root(root);
      out.push_back(make_crictl_resolver(std::move(exe), std::move(endpoint), options.crictl_timeout));
    }
  }
  out.push_back(make_log_dir_resolver(root));
  return out;
}

ContainerInfo resolve_container(const ContainerRef& ref, const Resolvers& resolvers) {
  ContainerInfo info;
  info.ref = ref;
  bool live = false;
  for (const auto& r : resolvers) {
    if (!r) continue;
    std::optional<PodMeta> m;
    try {
      m = r->resolve(ref);
    } catch (const std::exception&) {
      m.reset();  // a resolver written elsewhere broke the contract: treat as "not known"
    }
    if (!m) continue;
    live = r->proves_live_state();
    m->source = std::string(r->name());
    if (m->pod_uid.empty()) m->pod_uid = ref.pod_uid;
    info.meta = std::move(m);
    break;
  }
  info.deleted = !live;
  return info;
}

}  // namespace gpureap::container
