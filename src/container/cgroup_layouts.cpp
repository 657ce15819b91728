// cgroup_layouts: the layout table and the matcher that walks a cgroup path
// from its innermost segment outwards. Adding a runtime means adding a row to
// kLayouts, not another branch.
#include "container/cgroup_layouts.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace gpureap::container {

namespace {

// What the container segment's parent must be for a row to match.
enum class Parent : std::uint8_t {
  // The leaf name alone identifies the container; when the parent is a
  // kubepods pod cgroup (either driver's form), the pod UID and QoS come from it.
  pod_optional,
  // Parent must be a cgroupfs-driver pod dir: kubepods[/<qos>]/pod<uid>. A bare
  // 64-hex name proves nothing on its own, so the parent is required.
  kube_pod_cgroupfs,
  // Parent must be the directory named by Layout::parent_name.
  literal,
  // The pod slice is in the same segment: "<pod slice>:<prefix><ID>".
  colon_slice,
};

enum class Role : std::uint8_t { workload, monitor };

struct Layout {
  std::string_view prefix;  // before the ID in the container's segment
  std::string_view suffix;  // after the ID
  Runtime runtime;
  Parent parent;
  std::string_view parent_name;  // Parent::literal only
  Role role;
};

// Order matters only where prefixes overlap: conmon rows precede the CRI-O rows.
constexpr std::array kLayouts{
    // containerd, systemd driver: kubepods-<qos>-pod<U>.slice/cri-containerd-<ID>.scope
    Layout{"cri-containerd-", ".scope", Runtime::containerd, Parent::pod_optional, {}, Role::workload},
    // containerd on cgroupfs handed a systemd parent by the kubelet (driver mismatch):
    // "/kubepods-burstable-pod<U>.slice:cri-containerd:<ID>" as one literal directory
    Layout{"cri-containerd:", "", Runtime::containerd, Parent::colon_slice, {}, Role::workload},
    // CRI-O, systemd driver: conmon's own scope crio-conmon-<ID>.scope (monitor, not workload)
    Layout{"crio-conmon-", ".scope", Runtime::crio, Parent::pod_optional, {}, Role::monitor},
    // CRI-O, cgroupfs driver: conmon's own dir crio-conmon-<ID> (monitor, not workload)
    Layout{"crio-conmon-", "", Runtime::crio, Parent::pod_optional, {}, Role::monitor},
    // CRI-O, systemd driver: crio-<ID>.scope (crun on v2 adds a "container" leaf below it)
    Layout{"crio-", ".scope", Runtime::crio, Parent::pod_optional, {}, Role::workload},
    // CRI-O, cgroupfs driver: kubepods/<qos>/pod<uid>/crio-<ID>
    Layout{"crio-", "", Runtime::crio, Parent::pod_optional, {}, Role::workload},
    // docker or cri-dockerd, systemd driver: system.slice/docker-<ID>.scope or a pod slice
    Layout{"docker-", ".scope", Runtime::docker, Parent::pod_optional, {}, Role::workload},
    // nerdctl, systemd driver: system.slice/nerdctl-<ID>.scope (nerdctl's "system.slice:nerdctl:<ID>")
    Layout{"nerdctl-", ".scope", Runtime::nerdctl, Parent::pod_optional, {}, Role::workload},
    // containerd or cri-dockerd, cgroupfs driver: kubepods[/<qos>]/pod<uid>/<ID> (runtime not named)
    Layout{"", "", Runtime::unknown, Parent::kube_pod_cgroupfs, {}, Role::workload},
    // docker, cgroupfs driver: /docker/<ID> (also the outer level of docker-in-docker and kind)
    Layout{"", "", Runtime::docker, Parent::literal, "docker", Role::workload},
    // nerdctl, cgroupfs driver with a nerdctl parent: /nerdctl/<ID>
    Layout{"", "", Runtime::nerdctl, Parent::literal, "nerdctl", Role::workload},
    // nerdctl, cgroupfs driver default: containerd's /<namespace>/<ID>, namespace "default"
    Layout{"", "", Runtime::nerdctl, Parent::literal, "default", Role::workload},
};

constexpr bool is_lower_hex(char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }
bool ends_with(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.substr(s.size() - p.size()) == p;
}

// Kubernetes pod UIDs: a UUID with '-' (API-created pods) or 32 hex digits
// (static pods: the config hash). Anything else is not a pod directory.
bool is_pod_uid(std::string_view s) {
  if (s.size() != 36 && s.size() != 32) return false;
  for (char c : s) {
    if (!is_lower_hex(c) && c != '-') return false;
  }
  return true;
}

struct PodPart {
  std::string uid;
  Qos qos = Qos::none;
};

Qos qos_from_name(std::string_view name) {
  if (name == "burstable") return Qos::burstable;
  if (name == "besteffort") return Qos::besteffort;
  return Qos::none;
}

// systemd driver pod slice: "[prefix-]kubepods[-<qos>]-pod<U>.slice" with '_'
// in U where the UID has '-' ('-' is systemd's slice nesting separator). The
// optional prefix covers a kubelet cgroup root such as kind's "kubelet-".
std::optional<PodPart> parse_systemd_pod_slice(std::string_view seg) {
  if (!ends_with(seg, ".slice")) return std::nullopt;
  seg.remove_suffix(6);
  const std::size_t pod_at = seg.rfind("-pod");
  if (pod_at == std::string_view::npos) return std::nullopt;
  std::string uid(seg.substr(pod_at + 4));
  for (char& c : uid) {
    if (c == '_') c = '-';
  }
  if (!is_pod_uid(uid)) return std::nullopt;
  const std::string_view head = seg.substr(0, pod_at);  // "...kubepods" or "...kubepods-<qos>"
  PodPart out{std::move(uid), Qos::none};
  if (head == "kubepods" || ends_with(head, "-kubepods")) {
    out.qos = Qos::guaranteed;
    return out;
  }
  const std::size_t dash = head.rfind('-');
  if (dash == std::string_view::npos) return std::nullopt;
  const std::string_view parent = head.substr(0, dash);
  if (parent != "kubepods" && !ends_with(parent, "-kubepods")) return std::nullopt;
  out.qos = qos_from_name(head.substr(dash + 1));
  if (out.qos == Qos::none) return std::nullopt;
  return out;
}

// cgroupfs driver pod dir: segs[i] == "pod<uid>", under "kubepods" (guaranteed)
// or "kubepods/<qos>".
std::optional<PodPart> parse_cgroupfs_pod(const std::vector<std::string_view>& segs, std::size_t i) {
  if (!starts_with(segs[i], "pod")) return std::nullopt;
  const std::string_view uid = segs[i].substr(3);
  if (!is_pod_uid(uid) || i == 0) return std::nullopt;
  if (segs[i - 1] == "kubepods") return PodPart{std::string(uid), Qos::guaranteed};
  const Qos q = qos_from_name(segs[i - 1]);
  if (q == Qos::none || i < 2 || segs[i - 2] != "kubepods") return std::nullopt;
  return PodPart{std::string(uid), q};
}

std::optional<PodPart> parse_pod_segment(const std::vector<std::string_view>& segs, std::size_t i) {
  if (auto p = parse_systemd_pod_slice(segs[i])) return p;
  return parse_cgroupfs_pod(segs, i);
}

enum class Match : std::uint8_t { no, workload, monitor };

// Tries one row against segment i. On a workload match fills `out`.
Match match_row(const Layout& row, const std::vector<std::string_view>& segs, std::size_t i,
                ContainerRef& out) {
  std::string_view seg = segs[i];
  std::optional<PodPart> pod;
  if (row.parent == Parent::colon_slice) {
    const std::size_t colon = seg.find(':');
    if (colon == std::string_view::npos) return Match::no;
    pod = parse_systemd_pod_slice(seg.substr(0, colon));
    if (!pod) return Match::no;
    seg.remove_prefix(colon + 1);
  }
  if (!starts_with(seg, row.prefix) || !ends_with(seg, row.suffix)) return Match::no;
  if (seg.size() < row.prefix.size() + row.suffix.size()) return Match::no;
  const std::string_view id =
      seg.substr(row.prefix.size(), seg.size() - row.prefix.size() - row.suffix.size());
  if (!is_container_id(id)) return Match::no;

  switch (row.parent) {
    case Parent::pod_optional:
      if (i > 0) pod = parse_pod_segment(segs, i - 1);
      break;
    case Parent::kube_pod_cgroupfs:
      if (i == 0) return Match::no;
      pod = parse_cgroupfs_pod(segs, i - 1);
      if (!pod) return Match::no;
      break;
    case Parent::literal:
      if (i == 0 || segs[i - 1] != row.parent_name) return Match::no;
      break;
    case Parent::colon_slice:
      break;  // pod parsed above
  }
  if (row.role == Role::monitor) return Match::monitor;
  out.id = std::string(id);
  out.runtime = row.runtime;
  if (pod) {
    out.pod_uid = std::move(pod->uid);
    out.qos = pod->qos;
  }
  return Match::workload;
}

}  // namespace

bool is_container_id(std::string_view s) {
  if (s.size() != 64) return false;
  for (char c : s) {
    if (!is_lower_hex(c)) return false;
  }
  return true;
}

std::optional<ContainerRef> parse_container_path(std::string_view path) {
  // Trailing newline or CR from a raw line: tolerate, they are never part of a name.
  while (!path.empty() && (path.back() == '\n' || path.back() == '\r')) path.remove_suffix(1);
  if (path.empty() || path.front() != '/') return std::nullopt;

  std::vector<std::string_view> segs;
  while (!path.empty()) {
    const std::size_t slash = path.find('/');
    const std::string_view seg = path.substr(0, slash);
    if (seg == "..") return std::nullopt;  // relative to a cgroup namespace root we cannot see
    if (!seg.empty() && seg != ".") segs.push_back(seg);
    if (slash == std::string_view::npos) break;
    path.remove_prefix(slash + 1);
  }

  // Innermost first: nested runtimes (kind, docker-in-docker) put the workload
  // deepest; segments below a match (crun's "container" leaf, a systemd inside
  // the container) still belong to that container.
  for (std::size_t n = segs.size(); n > 0; --n) {
    const std::size_t i = n - 1;
    for (const Layout& row : kLayouts) {
      ContainerRef ref;
      switch (match_row(row, segs, i, ref)) {
        case Match::workload: return ref;
        case Match::monitor: return std::nullopt;
        case Match::no: break;
      }
    }
  }
  return std::nullopt;
}

namespace {
bool has_controller(std::string_view list, std::string_view want) {
  while (true) {
    const std::size_t comma = list.find(',');
    if (list.substr(0, comma) == want) return true;
    if (comma == std::string_view::npos) return false;
    list.remove_prefix(comma + 1);
  }
}
}  // namespace

std::optional<ContainerRef> container_from_cgroups(const std::vector<proc::CgroupLine>& lines) {
  // Rank 0: v1 memory; rank 1: the v2 unified line; rank 2: anything else.
  auto rank = [](const proc::CgroupLine& l) -> int {
    if (has_controller(l.controllers, "memory")) return 0;
    if (l.hierarchy_id == 0 && l.controllers.empty()) return 1;
    return 2;
  };
  for (int r = 0; r <= 2; ++r) {
    for (const auto& line : lines) {
      if (rank(line) != r) continue;
      if (auto ref = parse_container_path(line.path)) return ref;
    }
  }
  return std::nullopt;
}

}  // namespace gpureap::container
