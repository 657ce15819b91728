// The evidence of who holds a GPU context, computed once over a snapshot and
// asked per process by the context detectors and the hidden-holder one
// (contexts.cpp; docs/contexts.md says what each piece of evidence means).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "findings/finding.hpp"
#include "node/snapshot.hpp"

namespace gpureap::findings {

enum class Tri { no, yes, unknown };

// Whether a process shares an open file description of its GPU device files
// with live processes the driver lists (it inherited their context).
struct ListedSharing {
  Tri shares = Tri::unknown;  // unknown when its files, or a listed process's, are unknown
  std::vector<const node::ProcessRecord*> with;
};

class ContextEvidence {
 public:
  ContextEvidence(const node::NodeSnapshot& snap, const DetectOptions& opt);

  [[nodiscard]] ListedSharing sharing_with_listed(const node::ProcessRecord& r) const;
  // Why `r` holds the context of the listing `gone` (whose process is gone):
  // its creator's group or session, descriptions shared with the creator's
  // other inheritors, mappings the rule counts; "holds nvidiaN and is not
  // listed" when nothing was learnt either way. nullopt: not a holder (its own
  // listed context, another creator's, or a driver client's mappings).
  [[nodiscard]] std::optional<std::string> holder_evidence(const node::ProcessRecord& r,
                                                           const node::DriverListing& gone) const;
  // An unlisted holder that has no context: it shares no description with a
  // listed process and holds no gone listing's context by the evidence above.
  // Trusts the live driver's list (NVML in the host PID namespace lists every
  // context's creator); false where there is none (replay, no driver).
  [[nodiscard]] bool driver_client(const node::ProcessRecord& r) const;

 private:
  const node::NodeSnapshot& snap_;
  const DetectOptions& opt_;
  std::vector<const node::ProcessRecord*> listed_;  // live listed holders
  bool listed_files_unknown_ = false;               // some of them without known files
  std::vector<const node::DriverListing*> gone_;    // listings whose process is gone
};

}  // namespace gpureap::findings
