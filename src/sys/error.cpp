#include "sys/error.hpp"

#include <cstring>

namespace gpureap::sys {

Error errno_error(int saved_errno, std::string what) {
  what += ": ";
  what += std::strerror(saved_errno);
  return Error{saved_errno, std::move(what)};
}

}  // namespace gpureap::sys
