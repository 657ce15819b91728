// gpureap observe: the originating plan's in-container check (observe.sh), as a
// pure analysis of one NodeSnapshot taken inside the container (host root "/",
// the container's /proc: every PID here is container-local) and its renderers.
//
// The plan's script called live workers "ORPHANED GPU CONTEXT" when the driver
// listed them by their host PID (driver 590, PyTorch, Kubernetes). Here a
// driver-listed PID that matches no local process is called dead only when
// nothing local can explain it: see classify rules in observe.cpp and
// docs/observe.md.
#pragma once

#include <sys/types.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"

namespace gpureap::observe {

inline constexpr int kObserveSchema = 1;

// Programs that reap zombies and forward signals when run as PID 1, matched on
// comm or on the basename of argv[0] (the exe as started).
inline constexpr std::array<std::string_view, 12> kKnownInits = {
    "tini",        "tini-static", "dumb-init", "catatonit", "gpureap-init", "docker-init",
    "s6-svscan",   "runit",       "runsvdir",  "systemd",   "init",         "supervisord"};

// The init `p` is, by comm or argv[0] basename; nullopt when it is none of them.
std::optional<std::string> known_init(const proc::Process& p);

// What a driver-listed PID is, judged from inside the container's PID namespace.
enum class ListedStatus {
  alive,        // a local process with that PID (or the container-local PID of one)
  thread,       // a thread id of a local process (resolved through its Tgid)
  not_visible,  // no such local PID, but local processes hold that GPU unlisted:
                // the driver most likely reports PIDs of another namespace (host PIDs)
  dead,         // no such process and nothing local explains it: an orphaned context
};
std::string_view to_string(ListedStatus s);

// How the driver numbers PIDs for this namespace, from the evidence in the snapshot.
enum class DriverPidView {
  none,     // nothing listed
  local,    // at least one listed PID is a local GPU holder
  host,     // listed PIDs are absent here while local holders go unlisted (host PIDs)
  unknown,  // listed PIDs absent here and no local holder: cannot tell
};
std::string_view to_string(DriverPidView v);

struct Pid1Info {
  std::size_t record = 0;         // index into NodeSnapshot::records
  std::optional<std::string> init;  // the known init it is; nullopt: not an init
};

struct OrphanEntry {
  std::size_t record = 0;
  bool adopted = false;  // evidence it was reparented (its session or group leader is gone)
  std::string reason;
};

struct ListedEntry {
  std::size_t listing = 0;             // index into NodeSnapshot::listings
  ListedStatus status = ListedStatus::dead;
  std::optional<std::size_t> record;   // the local process when alive or thread
  std::string reason;                  // why this status, in words
};

struct HolderEntry {
  std::size_t record = 0;
  std::vector<unsigned> listed_on;     // devices the driver lists it on
  std::vector<unsigned> unlisted_on;   // devices whose node it holds and is not listed on
};

struct DeviceView {
  unsigned index = 0;
  std::string node;                    // "nvidia0": the device node of this GPU
  unsigned listed = 0;                 // driver listings on this GPU
  unsigned local_holders = 0;          // live local processes holding `node` (ourselves excluded)
  unsigned unlisted_holders = 0;       // of those, not listed on this GPU
  bool may_hide = false;               // fewer listings than local holders
  bool ghost = false;                  // memory used, nothing listed (a ghost_memory finding)
};

struct ObserveFinding {
  std::string kind;  // findings::to_string(Kind), or "pid1_not_init", "driver_host_pids",
                     // "driver_may_hide"
  findings::Severity severity = findings::Severity::info;
  std::optional<pid_t> pid;
  std::optional<unsigned> device;
  std::string message;
  std::string advice;
  std::vector<findings::Holder> holders;
  std::vector<pid_t> pids;
};

struct ContextSummary {
  unsigned alive = 0, thread = 0, not_visible = 0, dead = 0;
  DriverPidView view = DriverPidView::none;
  bool may_hide = false;
  std::vector<pid_t> unlisted_holders;  // 8-b: holders of a GPU node the driver does not list
  std::vector<unsigned> ghost_devices;  // 8-c
  std::vector<std::string> verdict;     // the summary in sentences
};

struct ObserveReport {
  std::optional<Pid1Info> pid1;        // nullopt: no PID 1 under the scanned /proc
  std::vector<std::size_t> zombies;    // record indexes
  std::vector<OrphanEntry> orphans;    // PPID 1, not PID 1, not a zombie
  std::vector<ListedEntry> listed;
  std::vector<HolderEntry> holders;    // every process holding an NVIDIA node, ourselves excluded
  std::vector<DeviceView> devices;
  ContextSummary context;
  std::vector<ObserveFinding> findings;

  // Any warning or critical finding: the check fails (exit 1).
  [[nodiscard]] bool fails_check() const;
};

// Pure: the classification of every section from the snapshot and the detectors' findings.
ObserveReport analyse_observe(const node::NodeSnapshot& snap,
                              const std::vector<findings::Finding>& found);

// The eight sections, numbered like the plan, then the findings.
std::string render_observe(const node::NodeSnapshot& snap, const ObserveReport& report);

// docs/observe.md: {"schema": 1, "pid1", "processes", "zombies", "orphans", "gpu", "listed",
// "holders", "orphaned_context", "findings", ...}
nlohmann::json observe_json(const node::NodeSnapshot& snap, const ObserveReport& report);

}  // namespace gpureap::observe
