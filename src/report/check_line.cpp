// gpureap check's one line for node-problem-detector: the worst root cause in
// at most 80 bytes (NPD cuts the rest), or OK.
#include <fmt/format.h>

#include <algorithm>

#include "report/report.hpp"

namespace gpureap::report {

namespace {

// Kinds in kAllKinds order are worst first; within a severity that order decides.
std::size_t rank(findings::Kind k) {
  const auto* at = std::find(std::begin(findings::kAllKinds), std::end(findings::kAllKinds), k);
  return static_cast<std::size_t>(at - std::begin(findings::kAllKinds));
}

// " (ns/pod)" of the finding's subject, else of the first holder it names; "" on the host.
std::string pod_of(const node::NodeSnapshot& snap, const findings::Finding& f) {
  std::vector<pid_t> candidates;
  if (f.pid) candidates.push_back(*f.pid);
  for (const auto& h : f.holders) candidates.push_back(h.pid);
  // A zombie whose cgroup no longer reads belongs to its parent's pod.
  if (const node::ProcessRecord* subject = f.pid ? snap.find(*f.pid) : nullptr; subject != nullptr) {
    candidates.push_back(subject->process.ppid);
  }
  for (pid_t pid : candidates) {
    const node::ProcessRecord* r = snap.find(pid);
    if (r == nullptr || !r->container || !r->container->meta || r->container->meta->pod_name.empty()) continue;
    return fmt::format(" ({}/{})", r->container->meta->pod_namespace, r->container->meta->pod_name);
  }
  return {};
}

std::string mib(const std::optional<std::uint64_t>& bytes) {
  return bytes ? fmt::format("{} MiB", *bytes >> 20) : std::string("memory");
}

std::string gpu(const findings::Finding& f) { return f.device ? fmt::format("GPU {}", *f.device) : "a GPU"; }

std::string short_text(const node::NodeSnapshot& snap, const findings::Finding& f) {
  using findings::Kind;
  const std::string pid = f.pid ? std::to_string(*f.pid) : "?";
  const std::string where = pod_of(snap, f);
  switch (f.kind) {
    case Kind::orphaned_context: return fmt::format("{} held on {} for gone pid {}{}", mib(f.bytes), gpu(f), pid, where);
    case Kind::latent_orphaned_context: return fmt::format("pid {} shares its {} context with forks{}", pid, gpu(f), where);
    case Kind::ghost_memory: return fmt::format("{} used on {}, no process listed", mib(f.bytes), gpu(f));
    case Kind::nccl_spin: return fmt::format("NCCL job spins on a dead rank, {} held{}", mib(f.bytes), where);
    case Kind::nccl_missing_rank: return fmt::format("NCCL job lost a rank, {} held{}", mib(f.bytes), where);
    case Kind::idle_holder: return fmt::format("pid {} idle with {} on {}{}", pid, mib(f.bytes), gpu(f), where);
    case Kind::zombie:
      return f.pids.size() > 1 ? fmt::format("{} zombies, first pid {}{}", f.pids.size(), pid, where)
                               : fmt::format("pid {} is a zombie{}", pid, where);
    case Kind::orphan: return fmt::format("pid {} is an orphan{}", pid, where);
    case Kind::hidden_holder: return fmt::format("pid {} holds the GPU, not listed{}", pid, where);
  }
  return pid;
}

}  // namespace

std::string fit_line(std::string line, std::size_t max_bytes) {
  for (char& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  if (line.size() <= max_bytes) return line;
  std::size_t cut = max_bytes;
  // Never split a UTF-8 sequence: back up to the start of the one cut through.
  while (cut > 0 && (static_cast<unsigned char>(line[cut]) & 0xC0U) == 0x80U) --cut;
  line.resize(cut);
  return line;
}

std::string render_check_line(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found) {
  std::vector<const findings::Finding*> problems;
  for (const auto& f : found) {
    if (f.severity != findings::Severity::info) problems.push_back(&f);
  }
  if (problems.empty()) {
    const Summary s = summarize(snap, found);
    return fit_line(fmt::format("OK: no GPU hygiene problem ({} GPU processes)", s.gpu_processes));
  }
  const auto* worst = *std::min_element(problems.begin(), problems.end(), [](const auto* a, const auto* b) {
    if (a->severity != b->severity) return a->severity > b->severity;
    if (rank(a->kind) != rank(b->kind)) return rank(a->kind) < rank(b->kind);
    return a->bytes.value_or(0) > b->bytes.value_or(0);
  });
  std::string line = fmt::format("{}: {}", findings::to_string(worst->kind), short_text(snap, *worst));
  const std::string more = problems.size() > 1 ? fmt::format(" +{} more", problems.size() - 1) : std::string();
  // The count of others survives the cut: it says the line is not all.
  if (line.size() + more.size() > kCheckLineBytes) line = fit_line(line, kCheckLineBytes - more.size());
  return fit_line(line + more);
}

}  // namespace gpureap::report
