#include "cli/session.hpp"

#include "container/pod_resolver.hpp"
#include "findings/finding.hpp"
#include "gpu/backend.hpp"
#include "node/take.hpp"
#include "sys/host_root.hpp"

namespace gpureap::cli {

sys::Result<node::NodeSnapshot> take_node_snapshot(const CommonOptions& options) {
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
  return node::take_snapshot(*root, **backend, resolvers, snap_options);
}

}  // namespace gpureap::cli
