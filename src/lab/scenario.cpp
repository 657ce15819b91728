#include "lab/scenario.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "sys/parse_number.hpp"

namespace gpureap::lab {

std::string_view to_string(Pid1 p) {
  switch (p) {
    case Pid1::bash:
      return "bash";
    case Pid1::tini:
      return "tini";
    case Pid1::gpureap_init:
      return "gpureap-init";
  }
  return "?";
}

std::string_view to_string(Worker w) {
  switch (w) {
    case Worker::ignores_term:
      return "ignores_term";
    case Worker::cleans_up:
      return "cleans_up_on_term";
    case Worker::forks_after_init:
      return "forks_after_init";
    case Worker::nccl_rank:
      return "nccl_rank";
  }
  return "?";
}

const ScenarioDef* find_scenario(std::string_view id) {
  for (const auto& s : kScenarios) {
    if (s.id == id) return &s;
  }
  return nullptr;
}

namespace {

std::string instance_name(const ScenarioDef& def, unsigned workers, unsigned uid,
                          unsigned default_workers, unsigned default_uid) {
  std::string name(def.id);
  if (workers != default_workers) name += "-w" + std::to_string(workers);
  if (uid != default_uid) name += "-uid" + std::to_string(uid);
  return name;
}

}  // namespace

sys::Result<Instance> parse_instance(std::string_view text, unsigned default_workers,
                                     unsigned default_uid) {
  const std::string whole(text);
  auto bad = [&](const std::string& why) {
    return sys::Error{EINVAL, "--scenarios: '" + whole + "': " + why};
  };
  const auto dash = text.find('-');
  const ScenarioDef* def = find_scenario(text.substr(0, dash));
  if (def == nullptr)
    return bad("no such scenario (S1 … S" + std::to_string(kScenarios.size()) + ")");
  Instance inst{def, {}, default_workers, default_uid};
  std::string_view rest =
      dash == std::string_view::npos ? std::string_view{} : text.substr(dash + 1);
  while (!rest.empty()) {
    const auto next = rest.find('-');
    const std::string_view part = rest.substr(0, next);
    rest = next == std::string_view::npos ? std::string_view{} : rest.substr(next + 1);
    if (part.size() > 1 && part[0] == 'w') {
      auto n = sys::parse_number<unsigned>(part.substr(1));
      if (!n || *n == 0 || *n > 64) return bad("workers must be 1 … 64");
      inst.workers = *n;
    } else if (part.size() > 3 && part.substr(0, 3) == "uid") {
      auto n = sys::parse_number<unsigned>(part.substr(3));
      if (!n) return bad("uid must be a number");
      inst.uid = *n;
    } else {
      return bad("unknown variant '" + std::string(part) + "' (w<N> workers, uid<UID>)");
    }
  }
  inst.name = instance_name(*def, inst.workers, inst.uid, default_workers, default_uid);
  return inst;
}

sys::Result<std::vector<Instance>> parse_instances(std::string_view list, unsigned default_workers,
                                                   unsigned default_uid) {
  std::vector<Instance> out;
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (item.empty()) continue;
    auto inst = parse_instance(item, default_workers, default_uid);
    if (!inst) return inst.error();
    const bool dup = std::any_of(out.begin(), out.end(),
                                 [&](const Instance& i) { return i.name == inst->name; });
    if (dup) return sys::Error{EINVAL, "--scenarios: '" + inst->name + "' given twice"};
    out.push_back(std::move(*inst));
  }
  if (out.empty()) return sys::Error{EINVAL, "--scenarios: no scenario given"};
  return out;
}

std::vector<Instance> default_instances(unsigned default_workers, unsigned default_uid) {
  std::vector<Instance> out;
  out.reserve(kScenarios.size() + 2);
  for (const auto& s : kScenarios) {
    out.push_back(Instance{&s, std::string(s.id), default_workers, default_uid});
  }
  // The plan's first runs varied S1: ten workers at once, and a non-root user.
  const ScenarioDef& s1 = kScenarios[0];
  if (default_workers != 10) {
    out.push_back(Instance{&s1, instance_name(s1, 10, default_uid, default_workers, default_uid),
                           10, default_uid});
  }
  if (default_uid != 1000) {
    out.push_back(Instance{&s1,
                           instance_name(s1, default_workers, 1000, default_workers, default_uid),
                           default_workers, 1000});
  }
  return out;
}

std::string pod_name(const ScenarioDef& s) {
  return "gpu-zombie-" + std::string(s.slug);
}

std::vector<std::string> pid1_command(const ScenarioDef& s, TimeScale scale) {
  switch (s.pid1) {
    case Pid1::bash:
      return {"bash", "-c", "sleep infinity"};
    case Pid1::tini:
      return {"tini", "--", "sleep", "infinity"};
    case Pid1::gpureap_init:
      return {"gpureap-init",
              "--gpu-grace",
              seconds_text(scale(s.init_gpu_grace_s)),
              "--grace",
              seconds_text(scale(s.init_grace_s)),
              "--",
              "sleep",
              "infinity"};
  }
  return {};
}

std::vector<std::string> worker_command(const ScenarioDef& s, const std::string& worker,
                                        unsigned workers, std::string_view gpu, unsigned device,
                                        TimeScale scale) {
  std::vector<std::string> argv = {worker,         "parent",
                                   "--exit-after", seconds_text(scale(kParentExitAfterS)),
                                   "--count",      std::to_string(workers),
                                   "--",           worker};
  if (s.worker == Worker::forks_after_init) {
    argv.insert(argv.end(), {"fork-after-init", "--children", std::to_string(s.forked_children),
                             "--ignore-term"});
  } else {
    argv.push_back("hold");
    argv.push_back(s.worker == Worker::cleans_up ? "--term-cleanup" : "--ignore-term");
  }
  argv.insert(argv.end(), {"--gpu", std::string(gpu), "--device", std::to_string(device), "--bytes",
                           std::to_string(kWorkerBytes)});
  return argv;
}

std::vector<std::string> prestop_command(const ScenarioDef& s, const std::string& gpureap,
                                         std::string_view gpu, TimeScale scale) {
  const double term_wait = scale(s.prestop_term_wait_s);
  const double deadline = std::max(scale(s.grace_s - kKubeletMinGraceS), term_wait);
  return {gpureap,       "prestop",
          "--gpu",       std::string(gpu),
          "--term-wait", seconds_text(term_wait),
          "--deadline",  seconds_text(deadline),
          "--json"};
}

std::string seconds_text(double seconds) {
  return fmt::format("{:.3g}", seconds);
}

nlohmann::json scenarios_json() {
  nlohmann::json arr = nlohmann::json::array();
  for (const auto& s : kScenarios) {
    nlohmann::json j = {
        {"id", s.id},
        {"slug", s.slug},
        {"pod", pod_name(s)},
        {"namespace", kPodNamespace},
        {"container", kContainerName},
        {"image_tag", s.image},
        {"title", s.title},
        {"pid1", to_string(s.pid1)},
        {"pid1_argv", pid1_command(s, TimeScale{})},
        {"worker", to_string(s.worker)},
        {"termination_grace_period_seconds", s.grace_s},
        {"prestop", nullptr},
        {"min_gpus", s.min_gpus},
        {"forked_children", s.forked_children},
        {"worker_bytes", kWorkerBytes},
        {"parent_exit_after_seconds", kParentExitAfterS},
        // what a pod of the charts execs on a real GPU (one worker, device 0): the
        // dynamically linked worker, which dlopens libcuda, as the lab on a GPU
        {"worker_argv", worker_command(s, "gpureap-worker-dynamic", 1, "cuda", 0, TimeScale{})}};
    if (s.has_prestop()) {
      j["prestop"] = {{"term_wait_seconds", s.prestop_term_wait_s},
                      {"argv", prestop_command(s, "gpureap", "nvml", TimeScale{})}};
    }
    if (s.pid1 == Pid1::gpureap_init) {
      j["gpureap_init"] = {{"gpu_grace_seconds", s.init_gpu_grace_s},
                           {"grace_seconds", s.init_grace_s}};
    }
    arr.push_back(std::move(j));
  }
  return {{"schema", 1}, {"scenarios", std::move(arr)}};
}

}  // namespace gpureap::lab
