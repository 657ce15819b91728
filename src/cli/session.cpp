#include "cli/session.hpp"

#include <algorithm>
#include <chrono>
#include <thread>

#include "gpu/activity.hpp"

#include "container/pod_resolver.hpp"
#include "findings/finding.hpp"
#include "gpu/backend.hpp"
#include "node/take.hpp"
#include "proc/kernel_fds.hpp"
#include "sys/host_root.hpp"

namespace gpureap::cli {

sys::Result<node::NodeSnapshot> take_node_snapshot(const CommonOptions& options, double sample_seconds,
                                                   double sample_period_seconds) {
  auto root = sys::HostRoot::open(sys::HostRoot::resolve_path(options.host_root));
  if (!root) return root.error();
  auto backend = gpu::make_backend(options.gpu, *root);
  if (!backend) return backend.error();
  if (auto reason = (*backend)->unavailable_reason(); !reason.empty()) log_note(reason);
  const auto resolvers = container::default_resolvers(*root, container::ResolverOptions{});
  node::SnapshotOptions snap_options;
  snap_options.threads = effective_threads(options);
  snap_options.fd_source = fd_source(options);
  snap_options.env_keys = findings::nccl_env_keys();  // torch.distributed jobs (nccl_missing_rank)
  proc::KernelPrograms pinned;  // with --bpf-pin-dir: taken from and left in that directory
  pinned.pin_dir = options.bpf_pin_dir;
  if (!pinned.pin_dir.empty()) snap_options.kernel_programs = &pinned;
  if (!(sample_seconds > 0)) return node::take_snapshot(*root, **backend, resolvers, snap_options);

  using Clock = std::chrono::system_clock;
  const auto period = std::chrono::milliseconds(static_cast<long long>(std::max(sample_period_seconds, 0.01) * 1000));
  const auto span = std::chrono::milliseconds(static_cast<long long>(sample_seconds * 1000));
  gpu::ActivitySampler sampler(span + period, period);
  // The processes listed at the start are observed from the start.
  if (auto first = (*backend)->snapshot(); first) sampler.add_listing(*first, Clock::now());
  const auto start = std::chrono::steady_clock::now();
  for (auto next = start;; next += period) {
    sampler.add_utilization((*backend)->process_utilization(sampler.since_us()), Clock::now());
    if (next + period > start + span) break;
    std::this_thread::sleep_until(next + period);  // the sampling period itself, not a synchronisation
  }
  auto snap = node::take_snapshot(*root, **backend, resolvers, snap_options);
  if (!snap) return snap;
  sampler.add_listing(snap->gpu, Clock::now());
  snap->activity = sampler.summarize(Clock::now());
  return snap;
}

}  // namespace gpureap::cli
