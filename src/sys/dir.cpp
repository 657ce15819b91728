#include "sys/dir.hpp"

#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>
#include <string_view>
#include <utility>

namespace gpureap::sys {

std::optional<DirListing> list_dir(int at, const char* rel) {
  UniqueFd dir(::openat(at, rel, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir) return std::nullopt;
  // fdopendir takes the fd it is given: hand it a duplicate, so `dir` stays
  // open for the caller after closedir.
  const int stream_fd = ::fcntl(dir.get(), F_DUPFD_CLOEXEC, 0);
  if (stream_fd < 0) return std::nullopt;
  DIR* stream = ::fdopendir(stream_fd);
  if (stream == nullptr) {
    const int saved = errno;
    ::close(stream_fd);
    errno = saved;
    return std::nullopt;
  }
  DirListing listing{std::move(dir), {}};
  int read_errno = 0;
  for (;;) {
    errno = 0;  // readdir's NULL means the end unless it set errno
    const dirent* e = ::readdir(stream);
    if (e == nullptr) {
      read_errno = errno;
      break;
    }
    const std::string_view name = e->d_name;
    if (name != "." && name != "..") listing.names.emplace_back(name);
  }
  ::closedir(stream);
  if (read_errno != 0) {
    errno = read_errno;
    return std::nullopt;
  }
  std::sort(listing.names.begin(), listing.names.end());
  return listing;
}

std::vector<std::string> entry_names(int at, const char* rel) {
  auto listing = list_dir(at, rel);
  return listing ? std::move(listing->names) : std::vector<std::string>{};
}

}  // namespace gpureap::sys
