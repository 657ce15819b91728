// The series of one scrape, rendered from the cached view (pure): what the
// exporter's prometheus-cpp collector returns at scrape time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <prometheus/metric_family.h>

#include "exporter/view.hpp"

namespace gpureap::exporter {

// The scan loop's own record, read at scrape time.
struct ScanHealth {
  std::uint64_t scans = 0;
  std::uint64_t errors = 0;
  bool stale = false;
  std::string version;
};

// One family per row of kSeries that has samples (build_info, the counters and
// the per-kind finding counts always have them). `view` may be null before the
// first scan.
std::vector<prometheus::MetricFamily> render_metrics(const View* view, const ScanHealth& health);

}  // namespace gpureap::exporter
