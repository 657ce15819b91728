// Reading what `gpureap observe --json` and `gpureap trace --json` said, for
// one scenario among others on the same node (pure functions over their JSON;
// docs/observe.md and docs/json-schema.md define it).
#pragma once

#include <sys/types.h>

#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>

#include "lab/measurements.hpp"

namespace gpureap::lab {

// What is this scenario's on the node: its pod, its processes, its own device.
struct ScenarioIdentity {
  std::string pod_uid;
  std::set<pid_t> host_pids;       // every process seen in its cgroup
  std::optional<unsigned> device;  // a device of its own (the simulated GPU)
};

// A string member of a JSON object, or "" (a line that merely looks like one
// of ours, or a field of another type, never throws).
std::string text_field(const nlohmann::json& j, const char* key);
// A JSON integer that is a valid pid, or nullopt; and such a member of an object.
std::optional<pid_t> as_pid(const nlohmann::json& v);
std::optional<pid_t> pid_field(const nlohmann::json& j, const char* key);

// Fills the observe part of `step` (PID 1, zombies, orphans, dead listings, findings).
void read_observe(const nlohmann::json& doc, StepReport& step);

// Fills the trace part of `step` with this scenario's findings: those about its
// processes (its pod's, or PIDs seen in its cgroup, dead ones included) or,
// where it owns a device, about that device.
void read_trace(const nlohmann::json& doc, const ScenarioIdentity& id, StepReport& step);

}  // namespace gpureap::lab
