// The web config file of the Prometheus exporter toolkit (--web.config.file in
// node_exporter and others), so operators configure TLS and basic auth the way
// they do for every other exporter:
//   tls_server_config: {cert_file, key_file, client_auth_type, client_ca_file, min_version}
//   basic_auth_users: {USER: BCRYPT_HASH, ...}
// Keys the toolkit has and civetweb cannot honour (cipher_suites, http2,
// headers, ...) are rejected by name rather than ignored. Relative paths are
// relative to the file, as in the toolkit.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "sys/error.hpp"

namespace gpureap::exporter {

struct TlsConfig {
  std::string cert_file;
  std::string key_file;
  std::string client_auth_type = "NoClientCert";
  std::string client_ca_file;
  std::string min_version = "TLS12";
};

struct WebConfig {
  std::optional<TlsConfig> tls;
  std::map<std::string, std::string> basic_auth_users;  // user -> bcrypt hash
};

// Pure: parses the file's text; errors name `what` and the key.
sys::Result<WebConfig> parse_web_config(std::string_view text, std::string_view what, std::string_view base_dir);
// Reads and parses FILE.
sys::Result<WebConfig> load_web_config(const std::string& path);

// civetweb's options for `listen` (":9464", "127.0.0.1:9464", "[::1]:9464")
// and the config. `pem_path` is a file holding the key and the certificate
// (civetweb wants both in one PEM), made by the caller. Pure.
sys::Result<std::vector<std::string>> civetweb_options(std::string_view listen, const WebConfig& config,
                                                       const std::string& pem_path, unsigned threads);

// An "Authorization: Basic ..." header against the users; false when absent,
// malformed or wrong. bcrypt through libcrypt (crypt_r), as the toolkit's hashes are.
bool authorized(const WebConfig& config, std::string_view authorization_header);

// base64 (RFC 4648, with padding) decoding; nullopt when malformed. Pure.
std::optional<std::string> decode_base64(std::string_view text);

}  // namespace gpureap::exporter
