#include "exporter/series.hpp"

namespace gpureap::exporter {

std::string_view unit_suffix(Unit unit) {
  switch (unit) {
    case Unit::bytes: return "_bytes";
    case Unit::seconds: return "_seconds";
    case Unit::ratio: return "_ratio";
    case Unit::info: return "_info";
    case Unit::none: return "";
  }
  return "";
}

std::string help_text(const SeriesSpec& spec) {
  std::string help(spec.what);
  switch (spec.unit) {
    case Unit::bytes: help += ", in bytes"; break;
    case Unit::seconds: help += ", in seconds"; break;
    case Unit::ratio: help += ", as a ratio (0-1)"; break;
    case Unit::info: help += "; the value is always 1"; break;
    case Unit::none: break;
  }
  if (spec.type == SeriesType::counter) help += "; a counter since the exporter started";
  return help + ".";
}

}  // namespace gpureap::exporter
