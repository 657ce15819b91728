// Listing a directory: one place that opens it, reads it and leaves out "."
// and "..", for every module that lists one (init keeps its own: it links
// no STL).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "sys/unique_fd.hpp"

namespace gpureap::sys {

struct DirListing {
  UniqueFd dir;                    // the directory, open: for *at() calls on its entries
  std::vector<std::string> names;  // its entries but "." and "..", sorted (stable output)
};

// Opens directory `rel` relative to directory fd `at` (AT_FDCWD: the working
// directory; "." the fd's own) and lists it. nullopt, with errno set, when it
// cannot be opened or read.
std::optional<DirListing> list_dir(int at, const char* rel);

// list_dir's names alone: none when the directory cannot be listed (a
// missing optional directory and an empty one read alike).
std::vector<std::string> entry_names(int at, const char* rel);

}  // namespace gpureap::sys
