// The civetweb/OpenSSL 3 shim (civetweb_ssl_shim.c), embedded in the binary
// and loaded from an anonymous file before civetweb starts TLS.
#pragma once

#include "sys/error.hpp"

namespace gpureap::exporter {

// Loads the shim (once per process is enough; a second load is harmless).
sys::Status load_tls_shim();

}  // namespace gpureap::exporter
