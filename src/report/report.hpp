// Renderers: the NodeSnapshot and its findings as a human table, as versioned
// JSON (docs/json-schema.md), and the counts both share.
#pragma once

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"

namespace gpureap::report {

inline constexpr int kJsonSchema = 1;

struct Summary {
  unsigned gpu_processes = 0;  // live processes listed by the driver or holding GPU descriptors
  unsigned listed = 0;         // live and listed by the driver
  unsigned dead_listed = 0;    // listed by the driver, no such process
  unsigned hidden = 0;         // hold descriptors, not listed
  unsigned zombies = 0;
  // The finding counts count root causes: an orphan or hidden holder grouped
  // under the context it holds (Finding::related) is not counted again.
  unsigned orphans = 0;        // orphan findings of their own
  unsigned findings = 0;       // warning or worse
  unsigned related = 0;        // findings grouped under a root cause
  unsigned scan_skipped = 0;   // vanished + denied + malformed /proc entries
};

Summary summarize(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found);

// The plan's trace table (PID, LOCAL_PID, STATE, GPU_MEM, LISTED, QOS, POD, NAMESPACE,
// CONTAINER, COMMAND), then findings with advice, then the summary.
// One entry of `processes` as compact JSON text, written directly: byte for
// byte what json_text(trace_json(...)["processes"][i], -1) gives, without
// building the object (the bulk of `trace --json` on a node of thousands).
std::string process_json_text(const node::NodeSnapshot& snap, const node::ProcessRecord& r);
// One entry of `findings`, the same way.
std::string finding_json_text(const findings::Finding& f);
// The same texts appended to `out` (write_trace_json's piece), with no string
// of their own.
void append_process_json(std::string& out, const node::NodeSnapshot& snap,
                         const node::ProcessRecord& r);
void append_finding_json(std::string& out, const findings::Finding& f);

std::string render_trace_table(const node::NodeSnapshot& snap,
                               const std::vector<findings::Finding>& found);
// The same table written to `out` as it is built (a node of thousands of GPU
// processes never holds it whole). False when a write failed.
[[nodiscard]] bool write_trace_table(std::FILE* out, const node::NodeSnapshot& snap,
                                     const std::vector<findings::Finding>& found);

// {"schema": 1, "taken_at", "host_root", "gpu", "processes", "findings", "summary", "scan"}
nlohmann::json trace_json(const node::NodeSnapshot& snap,
                          const std::vector<findings::Finding>& found);

// The same document written to `out` as it is built, one process or finding
// per line: memory stays flat on nodes with thousands of processes. False when
// a write failed (a closed pipe, a full disk).
[[nodiscard]] bool write_trace_json(std::FILE* out, const node::NodeSnapshot& snap,
                      const std::vector<findings::Finding>& found);

// The plan's node view: GPU summary, driver-listed processes, unlisted holders,
// ghost memory, other findings. (`gpureap node`; its --json is trace_json.)
std::string render_node_report(const node::NodeSnapshot& snap,
                               const std::vector<findings::Finding>& found);

// JSON as text for stdout. Names and command lines from /proc are arbitrary
// bytes: invalid UTF-8 is replaced (U+FFFD), never thrown on.
std::string json_text(const nlohmann::json& doc, int indent = 2);

// Writes text to `out` and flushes; false when either failed.
[[nodiscard]] bool write_text(std::FILE* out, const std::string& text);

// node-problem-detector reads at most 80 bytes of a plugin's stdout.
inline constexpr std::size_t kCheckLineBytes = 80;
// gpureap check's line: "OK: ..." or "<kind>: <the worst root cause>[ +N more]",
// at most kCheckLineBytes bytes, one line (pure).
std::string render_check_line(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found);
// `line` on one line, cut to `max_bytes` at a UTF-8 boundary.
std::string fit_line(std::string line, std::size_t max_bytes = kCheckLineBytes);

// Helpers shared by the renderers of other subcommands.
std::string format_bytes(std::uint64_t bytes);
bool gpu_related(const node::ProcessRecord& r);

}  // namespace gpureap::report
