// nccl_missing_rank: a torch.distributed job whose local ranks are missing
// while the survivors hold GPU memory. NCCL has no collective timeout: when a
// rank dies its peers spin in the next collective and keep their memory until
// PyTorch's watchdog ends them, or forever when error handling is off. The
// job's identity and the watchdog settings come from /proc/PID/environ (the
// initial environment: a value a program sets in os.environ later is not seen).
// Rules and their reasons: docs/nccl.md.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <map>
#include <set>

#include "findings/finding.hpp"

namespace gpureap::findings {

std::string_view to_string(Watchdog w) {
  switch (w) {
    case Watchdog::teardown: return "watchdog";
    case Watchdog::cleanup_only: return "watchdog_cleanup_only";
    case Watchdog::blocking_wait: return "blocking_wait";
    case Watchdog::hang: return "hang";
    case Watchdog::unknown: return "unknown";
  }
  return "unknown";
}

std::vector<std::string> nccl_env_keys() {
  return {"RANK",
          "WORLD_SIZE",
          "LOCAL_RANK",
          "LOCAL_WORLD_SIZE",
          "GROUP_RANK",
          "MASTER_ADDR",
          "MASTER_PORT",
          "TORCHELASTIC_RUN_ID",
          "TORCH_NCCL_ASYNC_ERROR_HANDLING",
          "NCCL_ASYNC_ERROR_HANDLING",
          "TORCH_NCCL_BLOCKING_WAIT",
          "NCCL_BLOCKING_WAIT"};
}

namespace {

using node::NodeSnapshot;
using node::ProcessRecord;

constexpr std::string_view kTimeoutNote = "the collective timeout (default 10 min for NCCL unless set in code)";

const std::string* env_of(const proc::Process& p, std::string_view key) {
  for (const auto& kv : p.env) {
    if (kv.first == key) return &kv.second;
  }
  return nullptr;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return s;
}

std::optional<int> parse_int(std::string_view s) {
  s = trim(s);
  int v = 0;
  const auto* end = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(s.data(), end, v);
  if (ec != std::errc() || ptr != end || s.empty()) return std::nullopt;
  return v;
}

std::optional<int> env_int(const proc::Process& p, std::string_view key) {
  const std::string* v = env_of(p, key);
  return v ? parse_int(*v) : std::nullopt;
}

std::string env_str(const proc::Process& p, std::string_view key) {
  const std::string* v = env_of(p, key);
  return v ? std::string(trim(*v)) : std::string();
}

bool is_loopback(std::string_view addr) {
  return addr == "localhost" || addr == "::1" || addr == "ip6-localhost" ||
         addr.substr(0, 4) == "127.";
}

// PyTorch's getCvarBool: 1/true → true, 0/false → false (case-insensitive here).
std::optional<bool> parse_bool(std::string_view s) {
  s = trim(s);
  std::string lower;
  for (char c : s) lower += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "1" || lower == "true") return true;
  if (lower == "0" || lower == "false") return false;
  return std::nullopt;
}

struct Verdict {
  Watchdog watchdog = Watchdog::teardown;
  std::string env;
  std::string detail;
};

// ProcessGroupNCCL reads each setting from the TORCH_ name first, then the older
// NCCL_ name; blocking wait, when on, replaces async error handling.
Verdict watchdog_of(const proc::Process& p) {
  for (std::string_view key : {"TORCH_NCCL_BLOCKING_WAIT", "NCCL_BLOCKING_WAIT"}) {
    const std::string* v = env_of(p, key);
    if (v == nullptr) continue;
    const auto on = parse_bool(*v);
    if (on && *on) {
      return {Watchdog::blocking_wait, fmt::format("{}={}", key, *v),
              fmt::format("blocking wait: raises after {}; the process ends only if nothing "
                          "catches the error",
                          kTimeoutNote)};
    }
    if (!on) {
      return {Watchdog::unknown, fmt::format("{}={}", key, *v),
              "unrecognised value: PyTorch rejects it when the process group is created"};
    }
    break;  // explicitly off: async error handling decides
  }
  for (std::string_view key : {"TORCH_NCCL_ASYNC_ERROR_HANDLING", "NCCL_ASYNC_ERROR_HANDLING"}) {
    const std::string* v = env_of(p, key);
    if (v == nullptr) continue;
    const std::string env = fmt::format("{}={}", key, *v);
    const auto mode = parse_int(*v);
    if (mode && *mode == 0) return {Watchdog::hang, env, "no watchdog: will hang until killed"};
    if (mode && (*mode == 1 || *mode == 3)) {
      return {Watchdog::teardown, env, fmt::format("watchdog will end it after {}", kTimeoutNote)};
    }
    if (mode && *mode == 2) {
      return {Watchdog::cleanup_only, env,
              fmt::format("watchdog aborts its communicators after {}; the process lives on "
                          "unless the error ends it",
                          kTimeoutNote)};
    }
    return {Watchdog::unknown, env,
            "unrecognised value: PyTorch rejects it when the process group is created"};
  }
  return {Watchdog::teardown, "default",
          fmt::format("watchdog will end it after {} (TORCH_NCCL_ASYNC_ERROR_HANDLING unset: "
                      "PyTorch >= 2.2 defaults to 3, tear down; older versions do not)",
                      kTimeoutNote)};
}

bool holds_device_node(const proc::Process& p) {
  return std::any_of(p.gpu_fds.begin(), p.gpu_fds.end(), [](const proc::DeviceUse& d) {
    std::string_view n = d.device;
    return n.size() > 6 && n.substr(0, 6) == "nvidia" &&
           n.find_first_not_of("0123456789", 6) == std::string_view::npos;
  });
}

std::string gib(std::uint64_t bytes) {
  return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / static_cast<double>(1ULL << 30));
}

// One process that carries a torch.distributed environment and holds the GPU.
struct Member {
  const ProcessRecord* record = nullptr;
  std::optional<int> rank;
  std::optional<int> local_rank;
  std::optional<int> world_size;
  std::optional<int> local_world_size;
};

struct Group {
  NcclGroup info;
  std::vector<Member> members;
};

std::string scope_of(const ProcessRecord& r) {
  if (!r.container) return "host";
  const auto& c = *r.container;
  const std::string& uid = c.meta && !c.meta->pod_uid.empty() ? c.meta->pod_uid : c.ref.pod_uid;
  if (!uid.empty()) return "pod " + uid;
  return "container " + c.ref.id;
}

// Groups by scope (a pod is its own node for torchrun, and two pods may both
// use MASTER_ADDR=localhost:29500), GROUP_RANK when set, then
// TORCHELASTIC_RUN_ID, else MASTER_ADDR:MASTER_PORT and WORLD_SIZE.
std::map<std::string, Group> group_members(const NodeSnapshot& snap) {
  std::map<std::string, Group> groups;
  for (const auto& r : snap.records) {
    const auto& p = r.process;
    if (p.env.empty() || p.pid == snap.self_pid) continue;
    // Only GPU holders are ranks; a zombie holds nothing but still says which rank died.
    if (!p.zombie() && p.gpu_fds.empty() && !r.listed()) continue;
    Member m;
    m.record = &r;
    m.rank = env_int(p, "RANK");
    m.local_rank = env_int(p, "LOCAL_RANK");
    m.world_size = env_int(p, "WORLD_SIZE");
    m.local_world_size = env_int(p, "LOCAL_WORLD_SIZE");
    if (!m.rank && !m.local_rank) continue;
    const std::string run_id = env_str(p, "TORCHELASTIC_RUN_ID");
    const std::string addr = env_str(p, "MASTER_ADDR");
    const auto port = env_int(p, "MASTER_PORT");
    const auto group_rank = env_int(p, "GROUP_RANK");
    std::string key = scope_of(r);
    if (group_rank) key += fmt::format("|node {}", *group_rank);
    if (!run_id.empty()) {
      key += "|run " + run_id;
    } else if (!addr.empty() && port) {
      key += fmt::format("|master {}:{} world {}", addr, *port,
                         m.world_size ? std::to_string(*m.world_size) : "?");
    } else {
      continue;  // nothing tells this job from another one
    }
    auto [it, fresh] = groups.try_emplace(key);
    Group& g = it->second;
    if (fresh) {
      g.info.scope = scope_of(r);
      g.info.run_id = run_id;
      g.info.master_addr = addr;
      g.info.master_port = port;
      g.info.world_size = m.world_size;
      g.info.group_rank = group_rank;
    }
    g.members.push_back(m);
  }
  return groups;
}

std::optional<Finding> judge(const NodeSnapshot& snap, Group& g) {
  NcclGroup& info = g.info;
  // The local world: LOCAL_WORLD_SIZE, else WORLD_SIZE when every rank is on this
  // node (a loopback master address), else unknown and nothing can be said.
  std::optional<int> lws;
  for (const auto& m : g.members) {
    if (m.local_world_size) lws = std::max(lws.value_or(0), *m.local_world_size);
    if (m.world_size && !info.world_size) info.world_size = m.world_size;
  }
  bool all_local = false;
  if (lws) {
    info.local_world_size_source = "LOCAL_WORLD_SIZE";
  } else if (info.world_size && is_loopback(info.master_addr)) {
    lws = info.world_size;
    all_local = true;
    info.local_world_size_source = fmt::format(
        "inferred from WORLD_SIZE: all ranks are local (MASTER_ADDR {} is loopback)", info.master_addr);
  }
  if (!lws || *lws <= 0 || *lws > 4096) return std::nullopt;
  info.local_world_size = *lws;

  auto local_rank_of = [&](const Member& m) -> std::optional<int> {
    if (m.local_rank) return m.local_rank;
    if (all_local) return m.rank;
    return std::nullopt;
  };
  std::set<int> present;
  std::vector<const Member*> live;
  for (const auto& m : g.members) {
    const auto lr = local_rank_of(m);
    if (!lr) continue;
    const auto& p = m.record->process;
    if (p.zombie()) {
      info.zombie_pids.push_back(p.pid);
      continue;
    }
    // A child forked by a rank (a DataLoader worker with inherited descriptors)
    // carries its parent's environment: it is part of that rank, not another one.
    const bool helper = std::any_of(g.members.begin(), g.members.end(), [&](const Member& o) {
      return o.record->process.pid == p.ppid && !o.record->process.zombie() && local_rank_of(o) == lr;
    });
    if (helper) continue;
    live.push_back(&m);
    if (*lr >= 0 && *lr < *lws) present.insert(*lr);
  }
  for (int i = 0; i < *lws; ++i) {
    if (present.count(i) == 0) info.missing_local_ranks.push_back(i);
  }
  info.present_local_ranks.assign(present.begin(), present.end());
  if (info.missing_local_ranks.empty() || live.empty()) return std::nullopt;

  bool holds_memory = false;
  bool any_hang = false;
  std::set<std::string> verdicts;
  for (const Member* m : live) {
    const ProcessRecord& r = *m->record;
    NcclSurvivor s;
    s.pid = r.process.pid;
    s.comm = r.process.comm;
    s.rank = m->rank;
    s.local_rank = *local_rank_of(*m);
    s.gpu_memory = snap.gpu_memory(r);
    for (std::size_t i : r.listings) {
      const unsigned dev = snap.listings[i].device_index;
      if (std::find(s.gpus.begin(), s.gpus.end(), dev) == s.gpus.end()) s.gpus.push_back(dev);
    }
    Verdict v = watchdog_of(r.process);
    s.watchdog = v.watchdog;
    s.watchdog_env = std::move(v.env);
    s.watchdog_detail = std::move(v.detail);
    if (s.gpu_memory) {
      info.survivor_memory += *s.gpu_memory;
      holds_memory = holds_memory || *s.gpu_memory > 0;
    } else if (holds_device_node(r.process)) {
      holds_memory = true;  // the driver gives no number; descriptors on a GPU node it has
    }
    any_hang = any_hang || s.watchdog == Watchdog::hang;
    verdicts.insert(std::string(to_string(s.watchdog)));
    info.survivors.push_back(std::move(s));
  }
  if (!holds_memory) return std::nullopt;
  info.watchdog = any_hang ? "hang" : verdicts.size() == 1 ? *verdicts.begin() : "mixed";

  Finding f;
  f.kind = Kind::nccl_missing_rank;
  f.severity = any_hang ? Severity::critical : Severity::warning;
  f.pid = info.survivors.front().pid;
  f.bytes = info.survivor_memory;
  std::set<unsigned> devices;
  for (const auto& s : info.survivors) devices.insert(s.gpus.begin(), s.gpus.end());
  if (devices.size() == 1) f.device = *devices.begin();

  const std::string job =
      !info.run_id.empty()
          ? fmt::format("run {}", info.run_id)
          : fmt::format("master {}:{}", info.master_addr,
                        info.master_port ? std::to_string(*info.master_port) : "?");
  std::string missing;
  for (int lr : info.missing_local_ranks) missing += fmt::format("{}{}", missing.empty() ? "" : ", ", lr);
  std::string who;
  for (const auto& s : info.survivors) {
    if (!who.empty()) who += "; ";
    who += fmt::format("pid {} ({}) local rank {}, {}: {}", s.pid, s.comm, s.local_rank,
                       s.gpu_memory ? gib(*s.gpu_memory) : "memory n/a", s.watchdog_detail);
  }
  f.message = fmt::format(
      "torch.distributed job {} ({}): local rank{} {} of {} missing{} while {} surviving rank{} "
      "hold {} of GPU memory; NCCL has no collective timeout, so they wait for the dead peer: {}",
      job, info.scope, info.missing_local_ranks.size() == 1 ? "" : "s", missing, *lws,
      info.zombie_pids.empty() ? "" : " (a zombie counts as missing)", info.survivors.size(),
      info.survivors.size() == 1 ? "" : "s", gib(info.survivor_memory), who);
  if (info.world_size && *info.world_size > *lws) {
    f.message += fmt::format("; ranks on other nodes ({} of world size {}) are not visible here",
                             *info.world_size - *lws, *info.world_size);
  }

  const ProcessRecord& first = *live.front()->record;
  std::string now;
  if (first.container && first.container->meta && !first.container->meta->pod_name.empty()) {
    now = fmt::format("Delete the pod {}/{} now to free {}", first.container->meta->pod_namespace,
                      first.container->meta->pod_name, gib(info.survivor_memory));
  } else {
    std::string pids;
    for (const auto& s : info.survivors) pids += fmt::format("{}{}", pids.empty() ? "" : " ", s.pid);
    now = fmt::format("{} now (pids {}) to free {}",
                      first.container ? "Delete the pod" : "Kill the surviving ranks", pids,
                      gib(info.survivor_memory));
  }
  f.advice = fmt::format(
      "{}{}. Fix the job: a SIGTERM handler that calls torch.distributed.destroy_process_group(), "
      "async error handling on (TORCH_NCCL_ASYNC_ERROR_HANDLING=1, or 3 = PyTorch >= 2.2's "
      "default; never 0), and a short timeout passed to "
      "init_process_group(timeout=timedelta(seconds=...)).",
      any_hang ? "These ranks will not exit on their own. " : "", now);
  f.group = std::make_shared<const NcclGroup>(std::move(info));
  return f;
}

}  // namespace

std::vector<Finding> detect_nccl_missing_ranks(const NodeSnapshot& snap) {
  std::vector<Finding> out;
  auto groups = group_members(snap);
  for (auto& [key, g] : groups) {
    if (auto f = judge(snap, g)) out.push_back(std::move(*f));
  }
  return out;
}

}  // namespace gpureap::findings
