// The plan's scenarios as data: one row each, in one table (kScenarios) that
// the lab runs and that deployment manifests are generated from or checked
// against (`gpureap lab --print-scenarios`). A run picks scenario *instances*:
// a scenario plus a variant ("S1", "S1-w10" = ten workers, "S1-uid1000").
#pragma once

#include <array>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sys/error.hpp"

namespace gpureap::lab {

// What runs as the container's PID 1 (its main child is always `sleep infinity`,
// as in the plan's images: the workload is started by exec, like `kubectl exec`).
enum class Pid1 : std::uint8_t {
  bash,          // ENTRYPOINT ["/bin/bash","-c"] CMD ["sleep infinity"]: bash execs sleep
  tini,          // ENTRYPOINT ["tini","--"] CMD ["sleep","infinity"]
  gpureap_init,  // ENTRYPOINT ["gpureap-init","--gpu-grace",…,"--"] CMD ["sleep","infinity"]
};
std::string_view to_string(Pid1 p);

enum class Worker : std::uint8_t {
  ignores_term,      // SIGTERM set to SIG_IGN (the plan's gpu_worker.py)
  cleans_up,         // SIGTERM handler releases the GPU and exits 0 (gpu_worker_fixed.py)
  forks_after_init,  // creates its context, then forks children without exec (a preforking server)
  nccl_rank,         // one rank of a torch.distributed job (S7)
};
std::string_view to_string(Worker w);

struct ScenarioDef {
  std::string_view id;     // "S1"
  std::string_view slug;   // "nofix": pod "gpu-zombie-<slug>"
  std::string_view image;  // image tag of the plan's CI matrix (S2 and S3 share "tini")
  std::string_view title;
  std::string_view label;  // a few words for a chart
  Pid1 pid1 = Pid1::tini;
  Worker worker = Worker::ignores_term;
  double grace_s = 30;             // terminationGracePeriodSeconds
  double prestop_term_wait_s = 0;  // the plan's preStop: TERM, wait this long, KILL; 0 = none
  double init_gpu_grace_s = 0;     // gpureap-init --gpu-grace (Pid1::gpureap_init only)
  double init_grace_s = 0;         // gpureap-init --grace
  unsigned forked_children = 0;    // Worker::forks_after_init
  unsigned min_gpus = 1;           // runs only where this many GPUs exist
  // How long the plan's README expected the GPU to be held during the deletion
  // (S1 measured by the plan, S2–S4 guessed); < 0: no expectation (ours).
  double plan_expected_hold_s = -1;
  [[nodiscard]] bool has_prestop() const { return prestop_term_wait_s > 0; }
};

// S1–S4 are the plan's; S5–S7 are ours (gpureap-init, the fork-inherited
// context the plan could not reproduce, the NCCL hang its first runs found).
// Every PID 1 runs `sleep infinity` as its main child, as the plan's images do.
inline constexpr std::array<ScenarioDef, 7> kScenarios{{
    {.id = "S1",
     .slug = "nofix",
     .image = "nofix",
     .title = "No fix: bash as PID 1, worker ignores SIGTERM",
     .label = "bash PID 1, TERM ignored",
     .pid1 = Pid1::bash,
     .worker = Worker::ignores_term,
     .grace_s = 30,
     .plan_expected_hold_s = 30},
    {.id = "S2",
     .slug = "tini",
     .image = "tini",
     .title = "tini as PID 1, worker ignores SIGTERM",
     .label = "tini, TERM ignored",
     .pid1 = Pid1::tini,
     .worker = Worker::ignores_term,
     .grace_s = 30,
     .plan_expected_hold_s = 30},
    {.id = "S3",
     .slug = "tini-prestop",
     .image = "tini",
     .title = "tini + the plan's preStop (TERM, wait 20 s, KILL)",
     .label = "tini + preStop, TERM ignored",
     .pid1 = Pid1::tini,
     .worker = Worker::ignores_term,
     .grace_s = 60,
     .prestop_term_wait_s = 20,
     .plan_expected_hold_s = 30},
    {.id = "S4",
     .slug = "fullfix",
     .image = "fullfix",
     .title = "Full fix: tini + preStop + a worker that cleans up on SIGTERM",
     .label = "tini + preStop + TERM handler",
     .pid1 = Pid1::tini,
     .worker = Worker::cleans_up,
     .grace_s = 90,
     .prestop_term_wait_s = 20,
     .plan_expected_hold_s = 0},
    {.id = "S5",
     .slug = "gpureap-init",
     .image = "gpureap-init",
     .title = "gpureap-init as PID 1, worker ignores SIGTERM",
     .label = "gpureap-init, TERM ignored",
     .pid1 = Pid1::gpureap_init,
     .worker = Worker::ignores_term,
     .grace_s = 30,
     .init_gpu_grace_s = 2,
     .init_grace_s = 20},
    {.id = "S6",
     .slug = "prefork",
     .image = "prefork",
     .title = "Fork-inherited context: the worker forks after CUDA init, its creator dies",
     .label = "forked children keep the context",
     .pid1 = Pid1::tini,
     .worker = Worker::forks_after_init,
     .grace_s = 30,
     .forked_children = 2},
    {.id = "S7",
     .slug = "nccl",
     .image = "nccl",
     .title = "NCCL: one rank of a torch.distributed job dies",
     .label = "NCCL rank dies",
     .pid1 = Pid1::tini,
     .worker = Worker::nccl_rank,
     .grace_s = 30,
     .min_gpus = 2},
}};

// The plan's fixed steps, before any --quick scaling.
// parent.py: spawn the worker, sleep 5 s, exit without wait().
inline constexpr double kParentExitAfterS = 5;
// The kubelet gives the runtime at least 2 s after the preStop hook.
inline constexpr double kKubeletMinGraceS = 2;
// The plan's worker: eight 1024×1024×64 float32 tensors.
inline constexpr std::uint64_t kWorkerBytes = 2ULL << 30;

const ScenarioDef* find_scenario(std::string_view id);

// One scenario as a run executes it.
struct Instance {
  const ScenarioDef* def = nullptr;
  std::string name;  // "S1", "S1-w10", "S1-uid1000": the output directory's name
  unsigned workers = 1;
  unsigned uid = 0;
  bool operator==(const Instance&) const = default;
};

// "S1", "S1-w10", "S1-uid1000", "S1-w10-uid1000"; suffixes override the run's
// defaults. Errors name the text.
sys::Result<Instance> parse_instance(std::string_view text, unsigned default_workers,
                                     unsigned default_uid);
// A comma-separated list; duplicates are an error.
sys::Result<std::vector<Instance>> parse_instances(std::string_view list, unsigned default_workers,
                                                   unsigned default_uid);
// Every scenario, plus the plan's S1 variants (ten workers; a non-root user).
std::vector<Instance> default_instances(unsigned default_workers, unsigned default_uid);

// Seconds of the plan scaled for a run (--quick: 0.1). Order and ratios are kept.
struct TimeScale {
  double factor = 1.0;
  [[nodiscard]] double operator()(double plan_seconds) const { return plan_seconds * factor; }
};

// The pod as the kubelet would name it.
std::string pod_name(const ScenarioDef& s);
inline constexpr std::string_view kPodNamespace = "gpu-zombie-test";
inline constexpr std::string_view kContainerName = "worker";

// PID 1's command line, programs by name ("bash", "tini", "gpureap-init"):
// the image's ENTRYPOINT + CMD. The runtime resolves the names to paths.
std::vector<std::string> pid1_command(const ScenarioDef& s, TimeScale scale);

// The C++ workload's command: `<worker> parent --exit-after … --count N --
// <worker> hold|fork-after-init … --gpu GPU --device D --bytes B`, what the lab
// execs in the pod (its --sim-dir appended on the simulated GPU) and what the
// charts' pods are checked against. `worker` is the program ("gpureap-worker" in
// the images), `gpu` is "sim" or "cuda".
std::vector<std::string> worker_command(const ScenarioDef& s, const std::string& worker,
                                        unsigned workers, std::string_view gpu, unsigned device,
                                        TimeScale scale);

// The preStop hook's command (scenarios with a preStop): `<gpureap> prestop
// --gpu GPU --term-wait W --deadline D --json`, D the grace less the kubelet's
// 2 s floor (at least W). What the lab execs as the hook and the charts' pods
// carry; `gpu` is "sim" or "nvml".
std::vector<std::string> prestop_command(const ScenarioDef& s, const std::string& gpureap,
                                         std::string_view gpu, TimeScale scale);

// Seconds as a short decimal for command lines ("2", "0.2", "20").
std::string seconds_text(double seconds);

// The table as JSON (for charts and their tests): one object per scenario.
nlohmann::json scenarios_json();

}  // namespace gpureap::lab
