#include "lab/lab.hpp"

#include <fcntl.h>
#include <fmt/format.h>
#include <signal.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <ctime>
#include <filesystem>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "gpu/backend.hpp"
#include "lab/ids.hpp"
#include "lab/kubelet.hpp"
#include "lab/node.hpp"
#include "lab/reading.hpp"
#include "lab/runtime.hpp"
#include "lab/sampler.hpp"
#include "lab/workload.hpp"
#include "proc/parse.hpp"
#include "sys/host_root.hpp"
#include "sys/pidfd.hpp"

namespace gpureap::lab {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr auto kSamplePeriod = std::chrono::milliseconds(10);
constexpr auto kToolTimeout = std::chrono::seconds(120);
// CUDA and PyTorch take seconds to start; the simulated worker milliseconds.
constexpr auto kWorkerStartTimeout = std::chrono::seconds(180);
// After the pod is gone the driver frees memory in ~0.1 s (FACTS.md): wait
// this long before calling it never released.
constexpr auto kReleaseWatch = std::chrono::seconds(10);

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// Progress lines on stderr: one per step of each scenario, and while pods are
// being deleted a line every few seconds with what each still holds.
class Progress {
 public:
  Progress(std::FILE* f, Clock::time_point t0) : f_(f), t0_(t0) {}
  void line(const std::string& who, const std::string& what) {
    std::lock_guard lock(mu_);
    print(who, what);
  }
  void deleting(const std::string& who, Clock::time_point since, double grace_s,
                GpuSampler::Id sid) {
    std::lock_guard lock(mu_);
    deleting_.push_back(Deleting{who, since, grace_s, sid});
  }
  void deleted(const std::string& who) {
    std::lock_guard lock(mu_);
    deleting_.erase(std::remove_if(deleting_.begin(), deleting_.end(),
                                   [&](const Deleting& d) { return d.who == who; }),
                    deleting_.end());
  }
  // One line with every pod still being deleted, if any.
  void tick(GpuSampler& sampler) {
    std::lock_guard lock(mu_);
    if (deleting_.empty()) return;
    std::string what;
    for (const auto& d : deleting_) {
      const auto bytes = sampler.latest(d.sid);
      what += fmt::format("{}{} {:.0f}/{:.0f} s ({:.2f} GiB)", what.empty() ? "" : ", ", d.who,
                          seconds_since(d.since), d.grace_s,
                          bytes ? static_cast<double>(*bytes) / kGiB : 0.0);
    }
    print("lab", "deleting: " + what);
  }

 private:
  struct Deleting {
    std::string who;
    Clock::time_point since;
    double grace_s;
    GpuSampler::Id sid;
  };
  void print(const std::string& who, const std::string& what) {
    fmt::print(f_, "gpureap lab [{:6.1f}s] {:<11} {}\n", seconds_since(t0_), who, what);
    (void)std::fflush(f_);
  }
  std::FILE* f_;
  Clock::time_point t0_;
  std::mutex mu_;
  std::vector<Deleting> deleting_;
};

// The PID 1 handles of running pods, so an interrupted lab ends them all.
class PodRegistry {
 public:
  void add(const std::string& name, int pidfd) {
    std::lock_guard lock(mu_);
    const int dup = ::fcntl(pidfd, F_DUPFD_CLOEXEC, 3);
    if (dup >= 0) pods_.emplace_back(name, sys::UniqueFd(dup));
  }
  void remove(const std::string& name) {
    std::lock_guard lock(mu_);
    pods_.erase(
        std::remove_if(pods_.begin(), pods_.end(), [&](const auto& p) { return p.first == name; }),
        pods_.end());
  }
  void kill_all() {
    std::lock_guard lock(mu_);
    for (auto& p : pods_) (void)sys::pidfd_send_signal(p.second.get(), SIGKILL);
  }

 private:
  std::mutex mu_;
  std::vector<std::pair<std::string, sys::UniqueFd>> pods_;
};

struct LabContext {
  const LabOptions& options;
  TimeScale scale;
  Toolbox tools;
  LabNode& node;
  Runtime& runtime;
  GpuSampler& sampler;
  GpuKind gpu = GpuKind::sim;
  Workload workload = Workload::cpp;
  std::string driver_version;
  std::vector<std::string> gpu_names;
  std::string out_dir;
  Progress& progress;
  PodRegistry& pods;
  std::atomic<bool>& cancelled;

  [[nodiscard]] unsigned gpu_count() const { return static_cast<unsigned>(gpu_names.size()); }
  // --gpu for a tool run on the node, and inside a container.
  [[nodiscard]] std::string gpu_on_node() const {
    return gpu == GpuKind::sim ? "sim:" + node.sim_dir() : "nvml";
  }
  [[nodiscard]] std::string gpu_inside() const { return gpu == GpuKind::sim ? "sim" : "nvml"; }
};

struct WorkerProc {
  pid_t local = 0;
  pid_t host = 0;
  std::vector<pid_t> children_local;
  std::vector<pid_t> children_host;
};

// The host PID of a process of the cgroup whose innermost NSpid is `local`.
std::optional<pid_t> host_pid_of(const PodCgroup& cgroup, pid_t local) {
  auto pids = cgroup.procs();
  if (!pids) return std::nullopt;
  for (pid_t p : *pids) {
    const std::string path = "/proc/" + std::to_string(p) + "/status";
    auto text = sys::read_file_at(AT_FDCWD, path.c_str(), path);
    if (!text) continue;
    auto st = proc::parse_status(*text);
    if (st && !st->nspid.empty() && st->nspid.back() == local) return p;
  }
  return std::nullopt;
}

// SIGKILL by pidfd, after checking that the pidfd names the process that was
// identified: still in the pod's cgroup, still the same container-local PID.
std::optional<sys::UniqueFd> kill_verified(const PodCgroup& cgroup, pid_t host, pid_t local) {
  auto fd = sys::pidfd_open(host);
  if (!fd) return std::nullopt;
  const std::string path = "/proc/" + std::to_string(host) + "/status";
  auto text = sys::read_file_at(AT_FDCWD, path.c_str(), path);
  auto st = text ? proc::parse_status(*text) : std::nullopt;
  if (!st || st->nspid.empty() || st->nspid.back() != local || !cgroup.contains(host))
    return std::nullopt;
  if (!sys::pidfd_send_signal(fd->get(), SIGKILL)) return std::nullopt;
  return std::move(*fd);
}

// A file's text, or "" when it cannot be read (a tool that wrote nothing).
std::string text_of_file(const std::string& path) {
  auto text = sys::read_file_at(AT_FDCWD, path.c_str(), path);
  return text ? std::move(*text) : std::string();
}

class InstanceRun {
 public:
  InstanceRun(LabContext& ctx, const Instance& inst, unsigned index)
      : ctx_(ctx),
        inst_(inst),
        def_(*inst.def),
        index_(index),
        dir_(ctx.out_dir + "/" + inst.name) {}

  Measurements run() {
    describe();
    std::error_code ec;
    fs::remove_all(dir_, ec);  // a re-run into the same DIR starts this scenario afresh
    fs::create_directories(dir_, ec);
    if (ec) {
      m_.error = "cannot create " + dir_ + ": " + ec.message();
      return m_;
    }
    if (auto why = why_not_run()) {
      m_.not_run = *why;
      say("not run: " + *why);
    } else if (auto err = procedure(); !err.empty()) {
      m_.error = err;
      say("could not run: " + err);
    }
    finish();
    return m_;
  }

 private:
  void say(const std::string& what) { ctx_.progress.line(inst_.name, what); }

  void describe() {
    m_.scenario = std::string(def_.id);
    m_.instance = inst_.name;
    m_.title = std::string(def_.title);
    m_.label = std::string(def_.label);
    if (inst_.workers != 1) m_.label += ", " + std::to_string(inst_.workers) + " workers";
    if (inst_.uid != 0) m_.label += ", uid " + std::to_string(inst_.uid);
    m_.workers = inst_.workers;
    m_.uid = inst_.uid;
    m_.runtime = std::string(ctx_.runtime.name());
    m_.workload = ctx_.workload == Workload::torch ? "torch" : "cpp";
    m_.gpu_backend = ctx_.gpu == GpuKind::sim ? "sim" : "nvml";
    m_.driver_version = ctx_.driver_version;
    m_.gpu_index = device();
    m_.gpu_name =
        m_.gpu_index < ctx_.gpu_names.size() ? ctx_.gpu_names[m_.gpu_index] : std::string();
    m_.quick = ctx_.options.quick;
    m_.time_scale = ctx_.scale.factor;
    m_.pid1 = std::string(to_string(def_.pid1));
    m_.pid1_command = pid1_command(def_, ctx_.scale);
    m_.grace_s = ctx_.scale(def_.grace_s);
    if (def_.has_prestop()) m_.prestop_term_wait_s = ctx_.scale(def_.prestop_term_wait_s);
    if (def_.pid1 == Pid1::gpureap_init) m_.init_gpu_grace_s = ctx_.scale(def_.init_gpu_grace_s);
    if (def_.plan_expected_hold_s >= 0)
      m_.plan_expected_hold_s = ctx_.scale(def_.plan_expected_hold_s);
    m_.sample_period_s = std::chrono::duration<double>(kSamplePeriod).count();
    m_.pod = pod_name(def_);
    if (inst_.name != def_.id) m_.pod += "-" + inst_.name.substr(def_.id.size() + 1);
  }

  // The simulated GPU gives every pod a device of its own; real GPUs are
  // shared round-robin and accounted by process.
  [[nodiscard]] unsigned device() const {
    if (ctx_.gpu == GpuKind::sim) return index_;
    return ctx_.gpu_count() == 0 ? 0 : index_ % ctx_.gpu_count();
  }

  [[nodiscard]] std::optional<std::string> why_not_run() const {
    if (def_.worker == Worker::nccl_rank) {
      if (ctx_.gpu == GpuKind::sim) {
        return std::string(
            "needs ≥ 2 GPUs with NCCL (the simulated GPU has no NCCL); tests/device/nccl has its "
            "code");
      }
      if (ctx_.gpu_count() < def_.min_gpus) {
        return "needs ≥ " + std::to_string(def_.min_gpus) + " GPUs (this node has " +
               std::to_string(ctx_.gpu_count()) + "); tests/device/nccl has its code";
      }
      return std::string(
          "needs ≥ 2 GPUs: run tests/device/nccl/run_s7.sh on this node (the lab does not run NCCL "
          "ranks)");
    }
    if (ctx_.gpu_count() < def_.min_gpus)
      return "needs ≥ " + std::to_string(def_.min_gpus) + " GPUs";
    return std::nullopt;
  }

  ContainerSpec container_spec() {
    ContainerSpec spec;
    spec.pod = m_.pod;
    spec.pod_namespace = std::string(kPodNamespace);
    spec.pod_uid = random_uuid();
    spec.container_name = std::string(kContainerName);
    spec.container_id = random_hex(64);
    for (const auto& a : m_.pid1_command)
      spec.pid1_argv.push_back(spec.pid1_argv.empty() ? ctx_.tools.resolve(a) : a);
    if (def_.pid1 == Pid1::gpureap_init && ctx_.gpu == GpuKind::sim) {
      // The simulated device's files count as a GPU for gpureap-init.
      spec.pid1_argv.insert(spec.pid1_argv.begin() + 1,
                            {"--gpu-device-prefix", ctx_.node.sim_dir() + "/dev/"});
    }
    spec.env = {"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root",
                "HOSTNAME=" + spec.pod,
                // Shared-host safety for anything NCCL-based (never NVLink multicast).
                "NCCL_NVLS_ENABLE=0", "TORCH_SYMM_MEM_DISABLE_MULTICAST=1",
                "NVSHMEM_DISABLE_NVLS=1"};
    if (ctx_.gpu == GpuKind::sim) spec.env.push_back("GPUREAP_SIM_DIR=" + ctx_.node.sim_dir());
    if (const char* ld = std::getenv("LD_LIBRARY_PATH"))
      spec.env.push_back(std::string("LD_LIBRARY_PATH=") + ld);
    spec.host_paths = ctx_.tools.host_paths();
    spec.host_paths.push_back(HostPath{ctx_.node.sim_dir(), true});
    spec.host_paths.push_back(HostPath{ctx_.node.python_dir(), false});
    spec.cgroup_parent = ctx_.node.cgroup_parent();
    return spec;
  }

  // The procedure of the plan's operator, then the kubelet's deletion.
  std::string procedure() {
    t_start_ = Clock::now();
    auto spec = container_spec();
    pod_uid_ = spec.pod_uid;
    auto log = ctx_.node.pod_log(spec);
    if (!log) return log.error().message;
    spec.log_path = *log;
    container_log_ = *log;
    auto wl = WorkloadLog::open(dir_ + "/workload.log", t_start_);
    if (!wl) return wl.error().message;
    workload_ = std::move(*wl);

    auto started = ctx_.runtime.start(spec);
    if (!started) return "start the container: " + started.error().message;
    container_ = std::move(*started);
    ctx_.pods.add(inst_.name, container_->init_pidfd());
    Attribution attribution;
    if (ctx_.gpu == GpuKind::sim) {
      attribution.device = device();
    } else {
      attribution.cgroup = container_->cgroup();
    }
    sid_ = ctx_.sampler.add(std::move(attribution));
    say("pod " + spec.pod + " up (" + m_.runtime + "), PID 1: " + join(spec.pid1_argv));

    // 1. The parent starts the worker(s) and exits 5 s later without wait().
    auto first = spawn_workers("spawn");
    if (!first) return first.error().message;
    if (auto err = observe_and_trace("after-spawn"); !err.empty()) return err;

    // 2. kill -9 the worker (S6: its creator; the forked children live on).
    if (auto err = kill_workers(*first); !err.empty()) return err;
    if (auto err = observe_and_trace("after-kill"); !err.empty()) return err;

    // 3. A fresh parent and worker, then the pod is deleted.
    auto second = spawn_workers("respawn");
    if (!second) return second.error().message;
    node_view("gpu-before-delete.log");
    return delete_and_watch();
  }

  static std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const auto& s : v) out += (out.empty() ? "" : " ") + s;
    return out;
  }

  sys::Result<std::vector<WorkerProc>> spawn_workers(const std::string& what) {
    if (ctx_.cancelled) return sys::Error{EINTR, "interrupted"};
    const std::size_t mark = workload_->count();
    auto cmd = parent_command(ctx_.tools, ctx_.node, ctx_.workload, ctx_.gpu, def_, inst_.workers,
                              device(), ctx_.scale);
    auto parent = container_->exec(
        ExecSpec{cmd.argv, cmd.env, inst_.uid, workload_->write_fd(), workload_->write_fd()});
    if (!parent)
      return sys::Error{parent.error().code, what + ": exec the parent: " + parent.error().message};
    auto ready = workload_->wait_workers(mark, inst_.workers, kWorkerStartTimeout);
    if (!ready)
      return sys::Error{ready.error().code,
                        what + ": " + ready.error().message + " (see " + dir_ + "/workload.log)"};
    const auto status =
        parent->wait(std::chrono::duration_cast<Clock::duration>(
                         std::chrono::duration<double>(ctx_.scale(kParentExitAfterS))) +
                     kToolTimeout);
    if (!status) return sys::Error{ETIMEDOUT, what + ": the parent did not exit"};
    std::vector<WorkerProc> workers;
    for (const auto& ev : *ready) {
      WorkerProc w;
      const auto local = pid_field(ev.line, "pid");
      if (!local)
        return sys::Error{EINVAL, what + ": a worker's ready line has no pid: " + ev.line.dump()};
      w.local = *local;
      if (auto h = host_pid_of(container_->cgroup(), w.local)) w.host = *h;
      if (auto c = ev.line.find("children"); c != ev.line.end() && c->is_array()) {
        for (const auto& x : *c) {
          const auto child = as_pid(x);
          if (!child) continue;
          w.children_local.push_back(*child);
          if (auto h = host_pid_of(container_->cgroup(), *child)) w.children_host.push_back(*h);
        }
      }
      if (w.host == 0)
        return sys::Error{
            ESRCH, what + ": worker " + std::to_string(w.local) + " is not in the pod's cgroup"};
      known_pids_.insert(w.host);
      known_pids_.insert(w.children_host.begin(), w.children_host.end());
      workers.push_back(std::move(w));
    }
    say(what + ": parent exited " + std::to_string(*status) + ", " +
        std::to_string(workers.size()) + " worker(s) holding the GPU, orphaned to PID 1");
    (void)ctx_.sampler.now(sid_);  // also records their host PIDs for the driver's accounting
    return workers;
  }

  std::string kill_workers(const std::vector<WorkerProc>& workers) {
    std::vector<sys::UniqueFd> killed;
    for (const auto& w : workers) {
      auto fd = kill_verified(container_->cgroup(), w.host, w.local);
      if (!fd) return "kill -9 worker " + std::to_string(w.host) + ": it could not be identified";
      killed.push_back(std::move(*fd));
      m_.forked_children.insert(m_.forked_children.end(), w.children_host.begin(),
                                w.children_host.end());
    }
    for (const auto& fd : killed) {
      if (auto done = sys::pidfd_wait_exit(fd.get(), 10000); !done || !*done)
        return "a killed worker did not die";
    }
    // The driver frees a killed process's memory ~0.1 s later; a context
    // inherited by forked children stays (that is what S6 shows).
    if (def_.worker != Worker::forks_after_init) {
      (void)ctx_.sampler.wait_until(
          sid_, [](std::uint64_t b) { return b == 0; }, std::chrono::seconds(5));
    }
    say("kill -9 " + std::to_string(workers.size()) + " worker(s)" +
        (m_.forked_children.empty() ? std::string() : "; their forked children live on"));
    return {};
  }

  // observe inside (while the pod lives) and trace on the node, both as JSON
  // (read) and as the table (kept for people).
  std::string observe_and_trace(const std::string& step) {
    if (ctx_.cancelled) return "interrupted";
    StepReport s;
    s.step = step;
    s.t = seconds_since(t_start_);
    if (container_) {
      if (auto p = container_->cgroup().procs()) known_pids_.insert(p->begin(), p->end());
    }
    s.gpu_bytes = ctx_.sampler.now(sid_).value_or(0);
    if (container_ && step != "after-delete") {
      for (const bool as_json : {true, false}) {
        const std::string base = dir_ + "/observe-" + step + (as_json ? ".json" : ".log");
        std::vector<std::string> argv = {ctx_.tools.gpureap, "observe", "--gpu", ctx_.gpu_inside()};
        if (as_json) argv.emplace_back("--json");
        auto rc = exec_to_files(argv, base, base + ".stderr");
        if (!rc) {
          s.error = "observe: " + rc.error().message;
          break;
        }
        if (as_json) {
          s.observe_exit = *rc;
          read_observe(json::parse(text_of_file(base), nullptr, false), s);
        }
      }
    }
    for (const bool as_json : {true, false}) {
      const std::string base = dir_ + "/trace-" + step + (as_json ? ".json" : ".log");
      std::vector<std::string> argv = {ctx_.tools.gpureap, "trace", "--host-root",
                                       ctx_.node.root(),   "--gpu", ctx_.gpu_on_node()};
      if (as_json) argv.emplace_back("--json");
      auto rc = run_to_files(argv, environment_with({}), base, base + ".stderr", kToolTimeout);
      if (!rc) {
        s.error += (s.error.empty() ? "" : "; ") + std::string("trace: ") + rc.error().message;
        break;
      }
      if (as_json) {
        s.trace_exit = *rc;
        ScenarioIdentity id{pod_uid_, known_pids_, std::nullopt};
        if (ctx_.gpu == GpuKind::sim) id.device = device();
        const auto sampled = ctx_.sampler.pids(sid_);
        id.host_pids.insert(sampled.begin(), sampled.end());
        read_trace(json::parse(text_of_file(base), nullptr, false), id, s);
      }
    }
    unsigned found = 0;
    for (const auto& f : s.trace_findings) found += f.severity != "info" ? 1U : 0U;
    say(step + ": observe saw " + std::to_string(s.zombies.size()) + " zombie(s), " +
        std::to_string(s.orphans.size()) + " orphan(s); trace: " + std::to_string(found) +
        " finding(s) for this pod");
    m_.steps.push_back(std::move(s));
    return {};
  }

  sys::Result<int> exec_to_files(const std::vector<std::string>& argv, const std::string& out_path,
                                 const std::string& err_path) {
    auto out = open_truncated(out_path);
    if (!out) return out.error();
    auto err = open_truncated(err_path);
    if (!err) return err.error();
    auto proc = container_->exec(ExecSpec{argv, {}, 0, out->get(), err->get()});
    if (!proc) return proc.error();
    auto rc = proc->wait(kToolTimeout);
    if (!rc) return sys::Error{ETIMEDOUT, argv[1] + " ran past its time limit"};
    return *rc;
  }

  void node_view(const std::string& file) {
    (void)run_to_files(
        {ctx_.tools.gpureap, "node", "--host-root", ctx_.node.root(), "--gpu", ctx_.gpu_on_node()},
        environment_with({}), dir_ + "/" + file, dir_ + "/" + file + ".stderr", kToolTimeout);
  }

  std::string delete_and_watch() {
    if (ctx_.cancelled) return "interrupted";
    m_.gpu_bytes_at_delete = ctx_.sampler.now(sid_).value_or(0);
    TerminationPlan plan{ctx_.scale(def_.grace_s), ctx_.scale(kKubeletMinGraceS),
                         def_.has_prestop()};
    say("deleting the pod: grace " + seconds_text(plan.grace_s) + " s" +
        (plan.prestop ? ", preStop first" : std::string()) + ", " + gib(m_.gpu_bytes_at_delete) +
        " held");
    const auto t0 = Clock::now();
    ctx_.sampler.start_recording(sid_, t0);
    ctx_.progress.deleting(inst_.name, t0, plan.grace_s, sid_);
    sys::UniqueFd hook_out, hook_err;
    auto start_prestop = [&]() -> sys::Result<Spawned> {
      auto out = open_truncated(dir_ + "/prestop.json");
      if (!out) return out.error();
      auto err = open_truncated(dir_ + "/prestop.log");
      if (!err) return err.error();
      hook_out = std::move(*out);
      hook_err = std::move(*err);
      return container_->exec(
          ExecSpec{prestop_command(def_, ctx_.tools.gpureap, ctx_.gpu_inside(), ctx_.scale),
                   {},
                   0,
                   hook_out.get(),
                   hook_err.get()});
    };
    m_.deletion = delete_pod(*container_, plan, t0, start_prestop);
    ctx_.pods.remove(inst_.name);
    ctx_.progress.deleted(inst_.name);
    const auto last = ctx_.sampler.wait_until(
        sid_, [](std::uint64_t b) { return b == 0; }, kReleaseWatch);
    m_.timeline = ctx_.sampler.stop_recording(sid_);
    // The reading just before the deletion holds from its start to the first sample.
    m_.timeline.insert(m_.timeline.begin(), Sample{0.0, m_.gpu_bytes_at_delete});
    m_.gpu_bytes_after_delete = last.value_or(0);
    if (auto left = container_->cgroup().procs())
      m_.survivors_after_delete = static_cast<unsigned>(left->size());
    const double t0_rel = std::chrono::duration<double>(t0 - t_start_).count();
    for (const auto& ev : workload_->events("sigterm")) {
      if (ev.t < t0_rel) continue;
      m_.term_reached_worker = true;
      m_.term_reached_worker_s = m_.term_reached_worker_s.value_or(ev.t - t0_rel);
    }
    m_.gpu_release_after_delete_s = release_time(m_.timeline);
    m_.gpu_gib_seconds_during_termination = gib_seconds(m_.timeline, m_.gpu_release_after_delete_s);
    say("pod gone: PID 1 exited " +
        (m_.deletion.pid1_status ? std::to_string(*m_.deletion.pid1_status) : "?") + ", GPU " +
        (m_.gpu_release_after_delete_s
             ? "released after " + seconds_text(*m_.gpu_release_after_delete_s) + " s"
             : std::string("still held")));
    container_->remove();
    if (auto err = observe_and_trace("after-delete"); !err.empty()) return err;
    node_view("gpu-after-delete.log");
    return {};
  }

  static std::string gib(std::uint64_t bytes) {
    return fmt::format("{:.2f} GiB", static_cast<double>(bytes) / kGiB);
  }

  // Totals over the steps, the cause of the release, the files.
  void finish() {
    if (container_) {
      // An error before the deletion: end the pod (PID 1's end ends the namespace).
      ctx_.pods.remove(inst_.name);
      if (!m_.deletion.pid1_exited_s)
        (void)sys::pidfd_send_signal(container_->init_pidfd(), SIGKILL);
      (void)container_->reap_init(std::chrono::seconds(30));
      for (auto& fd : kill_cgroup(container_->cgroup(), SIGKILL))
        (void)sys::pidfd_wait_exit(fd.get(), 10000);
      container_->remove();
      container_.reset();
    }
    workload_.reset();
    // Distinct over the steps: a context or a holder seen at two steps is one.
    std::set<pid_t> zombies, orphans, hidden;
    std::set<std::pair<unsigned, pid_t>> contexts, latent;  // (GPU, listed PID)
    for (const auto& s : m_.steps) {
      zombies.insert(s.zombies.begin(), s.zombies.end());
      orphans.insert(s.orphans.begin(), s.orphans.end());
      for (const auto& f : s.trace_findings) {
        if (f.kind == "orphaned_context") {
          contexts.emplace(f.gpu.value_or(0), f.pid.value_or(0));
          for (pid_t h : f.holders) {
            if (std::find(m_.orphaned_context_holders.begin(), m_.orphaned_context_holders.end(),
                          h) == m_.orphaned_context_holders.end()) {
              m_.orphaned_context_holders.push_back(h);
            }
          }
        }
        if (f.kind == "hidden_holder" && f.pid) hidden.insert(*f.pid);
        if (f.kind == "latent_orphaned_context")
          latent.emplace(f.gpu.value_or(0), f.pid.value_or(0));
      }
    }
    m_.orphaned_contexts = static_cast<unsigned>(contexts.size());
    m_.hidden_holders = static_cast<unsigned>(hidden.size());
    m_.latent_orphaned_contexts = static_cast<unsigned>(latent.size());
    m_.zombies = static_cast<unsigned>(zombies.size());
    m_.orphans = static_cast<unsigned>(orphans.size());
    if (!container_log_.empty()) {
      const std::string text = text_of_file(container_log_);
      m_.init_escalated =
          def_.pid1 == Pid1::gpureap_init && text.find("escalated: SIGKILL") != std::string::npos;
      keep(write_text_file(dir_ + "/container.log", text));
    }
    if (!m_.not_run && !m_.error) m_.release_cause = release_cause(m_);
    keep(write_text_file(dir_ + "/notes.md", notes_markdown(m_)));
    // Last, so it says whether anything of this scenario could not be written.
    if (auto st = write_text_file(dir_ + "/measurements.json", to_json(m_).dump(2) + "\n"); !st) {
      m_.error = st.error().message;
      say("could not write its results: " + st.error().message);
    }
  }

  // A file of the results that could not be written makes the scenario one the
  // lab could not run (exit 2): nothing is lost silently.
  void keep(const sys::Status& st) {
    if (!st && !m_.error) m_.error = st.error().message;
  }

  LabContext& ctx_;
  const Instance& inst_;
  const ScenarioDef& def_;
  unsigned index_;
  std::string dir_;
  Measurements m_;
  Clock::time_point t_start_;
  std::string pod_uid_;
  std::string container_log_;
  std::unique_ptr<WorkloadLog> workload_;
  std::unique_ptr<Container> container_;
  GpuSampler::Id sid_ = 0;
  std::set<pid_t> known_pids_;  // every host PID seen in the pod (a zombie leaves its cgroup)
};

// One scenario, on its own thread: an exception (out of memory, say) ends that
// scenario with an error instead of the whole lab (a thrown exception would
// terminate it with every pod left behind).
Measurements run_instance(LabContext& ctx, const Instance& inst, unsigned index) {
  try {
    return InstanceRun(ctx, inst, index).run();
  } catch (const std::exception& e) {
    Measurements m;
    m.scenario = std::string(inst.def->id);
    m.instance = inst.name;
    m.error = std::string("internal error: ") + e.what();
    ctx.progress.line(inst.name, *m.error);
    return m;
  }
}

std::string iso_now() {
  const std::time_t t = std::time(nullptr);
  std::tm tm{};
  ::gmtime_r(&t, &tm);
  char buf[32];
  const std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return std::string(buf, n);
}

// Ends the lab's pods when it is interrupted (Ctrl-C, SIGTERM, SIGHUP).
class InterruptWatch {
 public:
  InterruptWatch(PodRegistry& pods, std::atomic<bool>& cancelled, Progress& progress) {
    sigset_t set;
    sigemptyset(&set);
    for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
    // Blocked here before any thread starts, so every thread inherits it;
    // what the lab starts gets a clean mask back.
    ::pthread_sigmask(SIG_BLOCK, &set, &old_);
    thread_ = std::thread([this, set, &pods, &cancelled, &progress] {
      while (!done_) {
        timespec tick{0, 200'000'000L};
        const int sig = ::sigtimedwait(&set, nullptr, &tick);
        if (sig <= 0) continue;
        cancelled = true;
        progress.line("lab", std::string("interrupted by signal ") + std::to_string(sig) +
                                 ": ending every pod");
        pods.kill_all();
      }
    });
  }
  InterruptWatch(const InterruptWatch&) = delete;
  InterruptWatch& operator=(const InterruptWatch&) = delete;
  InterruptWatch(InterruptWatch&&) = delete;
  InterruptWatch& operator=(InterruptWatch&&) = delete;
  ~InterruptWatch() {
    done_ = true;
    thread_.join();
    ::pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_{};
  std::atomic<bool> done_{false};
  std::thread thread_;
};

}  // namespace

int run_lab(const LabOptions& options, std::FILE* out, std::FILE* progress_file) {
  auto fail = [&](const std::string& msg) {
    fmt::print(progress_file, "gpureap lab: {}\n", msg);
    return kLabExitCouldNotRun;
  };
  if (::geteuid() != 0)
    return fail("needs root: it creates namespaces, cgroups and containers (run it with sudo)");
  if (options.gpu != "auto" && options.gpu != "nvml" && options.gpu != "sim") {
    return fail("--gpu: '" + options.gpu + "' is not one of auto, nvml, sim");
  }
  if (options.runtime != "builtin" && options.runtime != "runc") {
    return fail("--runtime: '" + options.runtime + "' is not one of builtin, runc");
  }
  if (options.workload != "cpp" && options.workload != "torch") {
    return fail("--workload: '" + options.workload + "' is not one of cpp, torch");
  }
  if (options.workers == 0 || options.workers > 64) return fail("--workers: must be 1 … 64");
  auto instances =
      options.scenarios.empty()
          ? sys::Result<std::vector<Instance>>(default_instances(options.workers, options.uid))
          : parse_instances(options.scenarios, options.workers, options.uid);
  if (!instances) return fail(instances.error().message);

  const auto t_lab = Clock::now();
  Progress progress(progress_file, t_lab);
  const bool torch = options.workload == "torch";

  // The GPU: NVML where a driver answers with devices, else the simulated one.
  auto root = sys::HostRoot::open("/");
  if (!root) return fail(root.error().message);
  GpuKind gpu = GpuKind::sim;
  std::unique_ptr<gpu::GpuBackend> backend;
  std::optional<gpu::GpuSnapshot> first;
  if (options.gpu != "sim") {
    auto nvml = gpu::make_backend("nvml", *root);
    if (nvml) {
      auto snap = (*nvml)->snapshot();
      if (snap && !snap->devices.empty()) {
        gpu = GpuKind::nvml;
        first = *snap;
        backend = std::move(*nvml);
      } else if (options.gpu == "nvml") {
        return fail("--gpu nvml: no NVIDIA GPU answers here (" + (*nvml)->unavailable_reason() +
                    ")");
      }
    } else if (options.gpu == "nvml") {
      return fail("--gpu nvml: " + nvml.error().message);
    }
  }
  if (torch && gpu != GpuKind::nvml)
    return fail("--workload torch needs a real GPU (NVML); this run uses the simulated GPU");
  if (options.runtime == "runc" && gpu != GpuKind::sim) {
    return fail(
        "--runtime runc runs the simulated GPU only (the lab does not inject NVIDIA devices into "
        "runc's "
        "containers, the NVIDIA container toolkit's job); use --runtime builtin");
  }

  Toolbox::Needs needs;
  needs.runc = options.runtime == "runc";
  needs.python = torch;
  needs.dynamic_worker = gpu == GpuKind::nvml && !torch;
  auto tools = Toolbox::find(needs);
  if (!tools) return fail(tools.error().message);
  // Every refusal above writes nothing; from here on the run has a place to write.
  std::error_code ec;
  fs::create_directories(options.out_dir, ec);
  if (ec) return fail("cannot create " + options.out_dir + ": " + ec.message());
  auto node = LabNode::create();
  if (!node) return fail(node.error().message);
  // The workers run as the variant's uid too: exec them from the node's own
  // directory (every user may enter it), not from a build tree that user may
  // not reach (a checkout under a 0700 directory).
  const std::string bin = (*node)->root() + "/opt/gpureap-lab/bin";
  fs::create_directories(bin, ec);
  for (std::string* worker : {&tools->worker, &tools->worker_dynamic}) {
    if (ec || worker->empty()) continue;
    const std::string copy = bin + "/" + fs::path(*worker).filename().string();
    fs::copy_file(*worker, copy, fs::copy_options::overwrite_existing, ec);
    if (!ec) fs::permissions(copy, fs::perms(0755), ec);
    if (!ec) *worker = copy;
  }
  if (ec) return fail("cannot stage the workers in " + bin + ": " + ec.message());
  if (gpu == GpuKind::sim) {
    if (auto st = (*node)->init_sim(static_cast<unsigned>(instances->size())); !st)
      return fail(st.error().message);
    auto sim = gpu::make_backend("sim:" + (*node)->sim_dir(), *root);
    if (!sim) return fail(sim.error().message);
    backend = std::move(*sim);
    auto snap = backend->snapshot();
    if (!snap) return fail("the simulated GPU: " + snap.error().message);
    first = *snap;
  }
  if (torch) {
    if (auto st = (*node)->write_python(); !st) return fail(st.error().message);
    auto rc = run_to_files({tools->python3, "-c",
                            "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 3)"},
                           environment_with({}), "/dev/null", "/dev/null", kToolTimeout);
    if (!rc || *rc != 0)
      return fail("--workload torch: " + tools->python3 + " cannot import torch with CUDA here");
  }
  auto hierarchy = pods_hierarchy();
  if (!hierarchy) return fail(hierarchy.error().message);
  std::unique_ptr<Runtime> runtime;
  if (options.runtime == "runc") {
    auto r = make_runc_runtime(tools->runc, (*node)->root(), *hierarchy);
    if (!r) return fail(r.error().message);
    runtime = std::move(*r);
  } else {
    runtime = make_builtin_runtime(*hierarchy, (*node)->root());
  }

  std::vector<std::string> names;
  for (const auto& d : first->devices) names.push_back(d.name);
  GpuSampler sampler(std::move(backend), kSamplePeriod);
  PodRegistry pods;
  std::atomic<bool> cancelled{false};
  std::vector<Measurements> results(instances->size());
  {
    InterruptWatch watch(pods, cancelled, progress);
    LabContext ctx{options,
                   TimeScale{options.quick ? 0.1 : 1.0},
                   *tools,
                   **node,
                   *runtime,
                   sampler,
                   gpu,
                   torch ? Workload::torch : Workload::cpp,
                   first->driver_version,
                   names,
                   options.out_dir,
                   progress,
                   pods,
                   cancelled};
    progress.line("lab", std::string("start: ") + std::to_string(instances->size()) +
                             " scenario(s), " + (options.serial ? "one at a time" : "all at once") +
                             ", runtime " + options.runtime + ", workload " + options.workload +
                             ", GPU " + (gpu == GpuKind::sim ? "simulated" : "NVML") + " (" +
                             first->driver_version + ")" +
                             (options.quick ? ", --quick (every grace × 0.1)" : "") + ", node " +
                             (*node)->root());
    // While pods are deleted, a line every 5 s says what each still holds.
    std::mutex tick_mu;
    std::condition_variable tick_cv;
    bool ticking = true;
    std::thread ticker([&] {
      std::unique_lock lock(tick_mu);
      while (!tick_cv.wait_for(lock, std::chrono::seconds(5), [&] { return !ticking; }))
        progress.tick(sampler);
    });
    if (options.serial) {
      for (std::size_t i = 0; i < instances->size(); ++i) {
        results[i] = run_instance(ctx, (*instances)[i], static_cast<unsigned>(i));
      }
    } else {
      std::vector<std::thread> threads;
      for (std::size_t i = 0; i < instances->size(); ++i) {
        threads.emplace_back(
            [&, i] { results[i] = run_instance(ctx, (*instances)[i], static_cast<unsigned>(i)); });
      }
      for (auto& t : threads) t.join();
    }
    {
      std::lock_guard lock(tick_mu);
      ticking = false;
    }
    tick_cv.notify_all();
    ticker.join();
  }
  const auto leftovers = (*node)->cleanup();
  for (const auto& l : leftovers) progress.line("lab", "could not remove " + l);

  utsname host{};
  ::uname(&host);
  const std::string finished = iso_now();
  const std::string when = fmt::format("Measured {} on {} (kernel {}), {:.1f} s wall.", finished,
                                       host.nodename, host.release, seconds_since(t_lab));
  const std::string comparison = comparison_markdown(results, when);
  std::vector<sys::Status> written = {
      write_text_file(options.out_dir + "/comparison.md", comparison),
      write_text_file(options.out_dir + "/timeline.svg", timeline_svg(results))};
  {
    json run = {{"finished_at", finished},
                {"wall_s", std::round(seconds_since(t_lab) * 10.0) / 10.0},
                {"kernel", std::string(host.release)},
                {"host", std::string(host.nodename)},
                {"options",
                 {{"quick", options.quick},
                  {"scenarios", options.scenarios},
                  {"gpu", options.gpu},
                  {"runtime", options.runtime},
                  {"workload", options.workload},
                  {"workers", options.workers},
                  {"uid", options.uid},
                  {"serial", options.serial}}},
                {"sampler_errors", sampler.errors()},
                {"node_root", (*node)->root()},
                {"cgroup_parent", (*node)->cgroup_parent()},
                {"leftovers", leftovers},
                {"instances", json::array()}};
    for (const auto& m : results) run["instances"].push_back(m.instance);
    written.push_back(write_text_file(options.out_dir + "/run.json", run.dump(2) + "\n"));
  }
  fmt::print(out,
             "{}\nResults: {}/ (comparison.md, timeline.svg, <scenario>/notes.md, "
             "measurements.json, logs)\n",
             comparison, options.out_dir);
  (void)std::fflush(out);
  bool all_ran = !cancelled;
  for (const auto& m : results) all_ran = all_ran && !m.error;
  for (const auto& st : written) {
    if (st) continue;
    progress.line("lab", "could not write " + st.error().message);
    all_ran = false;
  }
  progress.line("lab", std::string("done in ") + seconds_text(seconds_since(t_lab)) + " s" +
                           (all_ran ? "" : ": some scenarios could not run (see their notes.md)"));
  return all_ran ? kLabExitOk : kLabExitCouldNotRun;
}

}  // namespace gpureap::lab
