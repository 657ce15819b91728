// Random identifiers in the shapes Kubernetes uses: pod UIDs and container IDs.
#pragma once

#include <cstddef>
#include <string>

namespace gpureap::lab {

std::string random_hex(std::size_t n);  // lowercase hex digits
std::string random_uuid();              // 8-4-4-4-12, version 4

}  // namespace gpureap::lab
