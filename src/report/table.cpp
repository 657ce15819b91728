#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <functional>
#include <string_view>

#include "report/report.hpp"

namespace gpureap::report {

std::string format_bytes(std::uint64_t bytes) {
  if (bytes >= (1ULL << 30)) {
    return fmt::format("{:.1f} GiB", static_cast<double>(bytes) / static_cast<double>(1ULL << 30));
  }
  return fmt::format("{} MiB", bytes >> 20);
}

namespace {

std::string cut(std::string s, std::size_t width) {
  if (s.size() > width) {
    s.resize(width - 1);
    s += "~";
  }
  return s;
}

struct Row {
  std::string pid, local, state, mem, listed, qos, pod, ns, container, command;
};

// Rows are built whole (aggregate initialisation), never assigned literals
// field by field: GCC 12 at -O3 takes those assignments for overlapping copies
// (a -Wrestrict false positive, GCC PR105651).
Row row_for(const node::NodeSnapshot& snap, const node::ProcessRecord& r) {
  const auto& p = r.process;
  std::string mem;
  if (auto bytes = snap.gpu_memory(r)) {
    mem = format_bytes(*bytes);
  } else {
    mem = std::string(r.listed() ? "n/a" : "fd_only");
  }
  std::string listed(r.listed() ? "Y" : "N");
  if (r.listed()) {
    auto m = snap.listings[r.listings.front()].match;
    if (m != node::PidMatch::host) listed.append("(").append(node::to_string(m)).append(")");
  }
  std::string qos("host"), pod("-"), ns("-"), container("-");
  if (r.container) {
    const auto& c = *r.container;
    qos = std::string(container::to_string(c.ref.qos));
    pod = c.meta ? c.meta->pod_name : std::string();
    ns = c.meta ? c.meta->pod_namespace : std::string();
    container = c.meta ? c.meta->container_name : std::string();
    if (pod.empty()) pod = "uid:" + c.ref.pod_uid;
    if (container.empty()) container = c.ref.id.substr(0, 12);
    if (c.deleted) pod += " (deleted)";
  }
  return Row{std::to_string(p.pid),
             p.nspid.size() >= 2 ? std::to_string(p.local_pid()) : std::string("-"),
             std::string(1, p.state),
             std::move(mem),
             std::move(listed),
             std::move(qos),
             std::move(pod),
             std::move(ns),
             std::move(container),
             cut(p.command_line(), 40)};
}

Row dead_row(const node::NodeSnapshot& snap, const node::DriverListing& l) {
  std::string pod("(no such process: orphaned context)");
  if (const proc::Process* now = snap.pid_now(l)) {
    pod = now->zombie() ? std::string("(a zombie now, holds no GPU fd: orphaned context)")
                        : "(pid reused by " + now->comm + ": orphaned context)";
  }
  return Row{std::to_string(l.entry.pid),
             std::string("-"),
             std::string("DEAD"),
             l.entry.used_memory ? format_bytes(*l.entry.used_memory) : std::string("n/a"),
             std::string("Y"),
             std::string("-"),
             std::move(pod),
             std::string("-"),
             std::string("-"),
             std::string("-")};
}

}  // namespace

namespace {

// Calls fn(row) for every row of the table, in order, building one at a time.
template <class Fn>
void for_each_row(const node::NodeSnapshot& snap, Fn&& fn) {
  for (const auto& r : snap.records) {
    if (r.process.pid == snap.self_pid || !gpu_related(r)) continue;
    fn(row_for(snap, r));
  }
  for (const auto& l : snap.listings) {
    if (node::names_gone_process(l.match)) fn(dead_row(snap, l));
  }
}

// The table, streamed: column widths come from a first pass that builds and
// drops each row, so a node of thousands of GPU processes never holds them all.
void emit_trace_table(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found,
                      const std::function<void(std::string_view)>& put) {
  const Row header{"PID", "LOCAL_PID", "STATE", "GPU_MEM", "LISTED", "QOS", "POD",
                   "NAMESPACE", "CONTAINER", "COMMAND"};
  auto fields = [](const Row& r) {
    return std::array<const std::string*, 10>{&r.pid, &r.local, &r.state, &r.mem, &r.listed,
                                              &r.qos, &r.pod, &r.ns, &r.container, &r.command};
  };
  std::array<std::size_t, 10> width{};
  std::size_t rows = 0;
  auto measure = [&](const Row& r) {
    auto f = fields(r);
    for (std::size_t i = 0; i < f.size(); ++i) width[i] = std::max(width[i], f[i]->size());
  };
  measure(header);
  for_each_row(snap, [&](const Row& r) {
    measure(r);
    ++rows;
  });
  std::string line;
  auto emit = [&](const Row& r) {
    auto f = fields(r);
    line.clear();
    for (std::size_t i = 0; i < f.size(); ++i) {
      line += fmt::format("{:<{}}", *f[i], i + 1 < f.size() ? width[i] + 2 : 0);
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    line += '\n';
    put(line);
  };
  emit(header);
  for_each_row(snap, emit);
  if (rows == 0) put("(no process holds or is listed on a GPU)\n");

  std::string out = "\nGPUs";
  out += snap.gpu.driver_version.empty() ? ":\n" : fmt::format(" (driver {}):\n", snap.gpu.driver_version);
  if (snap.gpu.devices.empty()) {
    out += fmt::format("  none ({})\n", snap.gpu_unavailable_reason.empty()
                                            ? "the backend reports no devices"
                                            : snap.gpu_unavailable_reason);
  }
  for (const auto& d : snap.gpu.devices) {
    std::string mem = "memory n/a";
    if (d.memory) {
      mem = fmt::format("{} used of {}", format_bytes(d.memory->used), format_bytes(d.memory->total));
      mem += d.memory->reserved ? fmt::format(", {} reserved", format_bytes(*d.memory->reserved))
                                : " (v1: includes reserved)";
    }
    out += fmt::format("  {} {} {}: {}, {} listed\n", d.index, d.name, d.uuid, mem,
                       d.processes.size());
  }
  put(out);

  if (!found.empty()) {
    put("\nFindings:\n");
    for (const auto& f : found) {
      put(fmt::format("  [{}] {}: {}\n      advice: {}\n", findings::to_string(f.severity),
                      findings::to_string(f.kind), f.message, f.advice));
      // Findings about the holders it names: the same root cause, indented under it.
      for (const auto& r : f.related) {
        put(fmt::format("      related [{}] {}: {}\n", findings::to_string(r.severity),
                        findings::to_string(r.kind), r.message));
      }
    }
  }

  const Summary s = summarize(snap, found);
  out = fmt::format(
      "\nSummary: {} GPU processes ({} listed, {} hidden), {} listed PIDs dead (orphaned "
      "contexts), {} zombies, {} orphans, {} findings",
      s.gpu_processes, s.listed, s.hidden, s.dead_listed, s.zombies, s.orphans, s.findings);
  if (s.related > 0) out += fmt::format(" ({} related grouped under them)", s.related);
  if (s.scan_skipped > 0) out += fmt::format("; {} /proc entries skipped", s.scan_skipped);
  out += "\n";
  put(out);
}

}  // namespace

std::string render_trace_table(const node::NodeSnapshot& snap,
                               const std::vector<findings::Finding>& found) {
  std::string out;
  emit_trace_table(snap, found, [&out](std::string_view piece) { out += piece; });
  return out;
}

bool write_trace_table(std::FILE* out, const node::NodeSnapshot& snap,
                       const std::vector<findings::Finding>& found) {
  bool ok = true;
  emit_trace_table(snap, found, [&](std::string_view piece) {
    ok = ok && std::fwrite(piece.data(), 1, piece.size(), out) == piece.size();
  });
  return std::fflush(out) == 0 && ok && std::ferror(out) == 0;
}

}  // namespace gpureap::report
