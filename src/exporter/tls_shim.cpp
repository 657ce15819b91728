#include "exporter/tls_shim.hpp"

#include <dlfcn.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <string>

#include "sys/unique_fd.hpp"

extern const unsigned char gpureap_civetweb_ssl_shim[];
extern const std::size_t gpureap_civetweb_ssl_shim_size;

namespace gpureap::exporter {

sys::Status load_tls_shim() {
  sys::UniqueFd fd(::memfd_create("libssl.so", MFD_CLOEXEC));
  if (!fd) return sys::errno_error(errno, "memfd_create for the TLS shim");
  std::size_t off = 0;
  while (off < gpureap_civetweb_ssl_shim_size) {
    const ssize_t n = ::write(fd.get(), gpureap_civetweb_ssl_shim + off, gpureap_civetweb_ssl_shim_size - off);
    if (n <= 0) return sys::errno_error(errno, "write the TLS shim");
    off += static_cast<std::size_t>(n);
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd.get());
  // Never closed: civetweb calls into it for the life of the process.
  if (::dlopen(path.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    const char* why = ::dlerror();
    return sys::Error{0, std::string("cannot load the TLS shim for civetweb: ") + (why != nullptr ? why : "?")};
  }
  return sys::Ok{};
}

}  // namespace gpureap::exporter
