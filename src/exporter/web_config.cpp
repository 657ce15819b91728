#include "exporter/web_config.hpp"

#include <crypt.h>
#include <fcntl.h>
#include <yaml-cpp/yaml.h>

#include <array>
#include <cstring>
#include <memory>
#include <set>

#include "sys/host_root.hpp"

namespace gpureap::exporter {

namespace {

sys::Error bad(std::string_view what, const std::string& key, const std::string& problem) {
  return sys::Error{EINVAL, std::string(what) + ": " + key + ": " + problem};
}

std::string resolve(std::string_view base_dir, const std::string& path) {
  if (path.empty() || path.front() == '/' || base_dir.empty()) return path;
  return std::string(base_dir) + "/" + path;
}

sys::Result<std::string> scalar(const YAML::Node& node, std::string_view what, const std::string& key) {
  if (!node.IsScalar()) return bad(what, key, "expected a string");
  return node.as<std::string>();
}

// Constant time over the shorter length, so a wrong password's timing says nothing.
bool same(const char* a, const std::string& b) {
  const std::size_t n = std::strlen(a);
  unsigned char diff = n == b.size() ? 0 : 1;
  for (std::size_t i = 0; i < n && i < b.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

}  // namespace

sys::Result<WebConfig> parse_web_config(std::string_view text, std::string_view what, std::string_view base_dir) {
  YAML::Node doc;
  try {
    doc = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return sys::Error{EINVAL, std::string(what) + ": not valid YAML: " + e.what()};
  }
  WebConfig config;
  if (doc.IsNull()) return config;
  if (!doc.IsMap()) return bad(what, "(top level)", "expected a mapping");
  for (const auto& item : doc) {
    const std::string key = item.first.as<std::string>();
    const YAML::Node& value = item.second;
    if (key == "tls_server_config") {
      if (value.IsNull()) continue;
      if (!value.IsMap()) return bad(what, key, "expected a mapping");
      TlsConfig tls;
      for (const auto& t : value) {
        const std::string k = t.first.as<std::string>();
        const std::string full = key + "." + k;
        if (k == "cert_file" || k == "key_file" || k == "client_auth_type" || k == "client_ca_file" ||
            k == "min_version") {
          auto v = scalar(t.second, what, full);
          if (!v) return v.error();
          if (k == "cert_file") tls.cert_file = resolve(base_dir, *v);
          if (k == "key_file") tls.key_file = resolve(base_dir, *v);
          if (k == "client_auth_type") tls.client_auth_type = *v;
          if (k == "client_ca_file") tls.client_ca_file = resolve(base_dir, *v);
          if (k == "min_version") tls.min_version = *v;
        } else {
          return bad(what, full, "not supported by gpureap (civetweb cannot honour it)");
        }
      }
      if (tls.cert_file.empty() || tls.key_file.empty()) {
        return bad(what, key, "cert_file and key_file are both required");
      }
      static const std::set<std::string> kAuthTypes = {"NoClientCert", "VerifyClientCertIfGiven",
                                                        "RequireAndVerifyClientCert"};
      if (kAuthTypes.count(tls.client_auth_type) == 0) {
        return bad(what, key + ".client_auth_type",
                   "'" + tls.client_auth_type +
                       "' not supported (NoClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)");
      }
      if (tls.client_auth_type != "NoClientCert" && tls.client_ca_file.empty()) {
        return bad(what, key + ".client_ca_file", "required when client certificates are verified");
      }
      static const std::set<std::string> kVersions = {"TLS10", "TLS11", "TLS12", "TLS13"};
      if (kVersions.count(tls.min_version) == 0) {
        return bad(what, key + ".min_version", "'" + tls.min_version + "' (TLS10, TLS11, TLS12, TLS13)");
      }
      config.tls = std::move(tls);
    } else if (key == "basic_auth_users") {
      if (value.IsNull()) continue;
      if (!value.IsMap()) return bad(what, key, "expected a mapping of user to bcrypt hash");
      for (const auto& u : value) {
        const std::string user = u.first.as<std::string>();
        auto hash = scalar(u.second, what, key + "." + user);
        if (!hash) return hash.error();
        if (hash->rfind("$2", 0) != 0) return bad(what, key + "." + user, "expected a bcrypt hash ($2y$...)");
        if (user.find(':') != std::string::npos) return bad(what, key + "." + user, "a user name cannot hold ':'");
        config.basic_auth_users.emplace(user, *hash);
      }
    } else {
      return bad(what, key, "not supported by gpureap (known: tls_server_config, basic_auth_users)");
    }
  }
  return config;
}

sys::Result<WebConfig> load_web_config(const std::string& path) {
  auto text = sys::read_file_at(AT_FDCWD, path.c_str(), path);
  if (!text) return text.error();
  const auto slash = path.rfind('/');
  return parse_web_config(*text, path, slash == std::string::npos ? "." : path.substr(0, slash));
}

sys::Result<std::vector<std::string>> civetweb_options(std::string_view listen, const WebConfig& config,
                                                       const std::string& pem_path, unsigned threads) {
  std::string port(listen);
  if (port.empty()) return sys::Error{EINVAL, "--listen: empty address"};
  if (port.front() == ':') port.erase(0, 1);  // ":9464": every address
  const auto colon = port.rfind(':');
  const std::string number = colon == std::string::npos ? port : port.substr(colon + 1);
  if (number.empty() || number.find_first_not_of("0123456789") != std::string::npos) {
    return sys::Error{EINVAL, "--listen: '" + std::string(listen) + "' is not [HOST]:PORT"};
  }
  std::vector<std::string> o = {
      "listening_ports", port + (config.tls ? "s" : ""),
      "num_threads", std::to_string(threads),
      // A slow or stalled client holds a thread at most this long.
      "request_timeout_ms", "5000",
      "linger_timeout_ms", "500",
      "enable_keep_alive", "no",
      "max_request_size", "8192",
      // Connections beyond the threads wait here; more are refused by the kernel.
      "connection_queue", "32",
      "listen_backlog", "32",
  };
  if (config.tls) {
    const TlsConfig& t = *config.tls;
    o.insert(o.end(), {"ssl_certificate", pem_path});
    const std::string version = t.min_version == "TLS13"   ? "5"
                                : t.min_version == "TLS12" ? "4"
                                : t.min_version == "TLS11" ? "3"
                                                           : "2";
    o.insert(o.end(), {"ssl_protocol_version", version});
    if (t.client_auth_type != "NoClientCert") {
      o.insert(o.end(), {"ssl_verify_peer", t.client_auth_type == "RequireAndVerifyClientCert" ? "yes" : "optional",
                         "ssl_ca_file", t.client_ca_file});
    }
  }
  return o;
}

std::optional<std::string> decode_base64(std::string_view text) {
  static constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out;
  unsigned buffer = 0;
  int bits = 0;
  std::size_t padding = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (c == '=') {
      if (i + 2 < text.size()) return std::nullopt;  // padding only at the end
      ++padding;
      continue;
    }
    if (padding != 0) return std::nullopt;
    const auto at = kAlphabet.find(c);
    if (at == std::string_view::npos) return std::nullopt;
    buffer = (buffer << 6U) | static_cast<unsigned>(at);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<char>((buffer >> static_cast<unsigned>(bits)) & 0xFFU));
    }
  }
  return out;
}

bool authorized(const WebConfig& config, std::string_view header) {
  constexpr std::string_view kBasic = "Basic ";
  if (header.substr(0, kBasic.size()) != kBasic) return false;
  auto decoded = decode_base64(header.substr(kBasic.size()));
  if (!decoded) return false;
  const auto colon = decoded->find(':');
  if (colon == std::string::npos) return false;
  const std::string user = decoded->substr(0, colon);
  const std::string password = decoded->substr(colon + 1);
  auto it = config.basic_auth_users.find(user);
  // An unknown user still costs one bcrypt, so timing does not tell users apart.
  const std::string& hash = it != config.basic_auth_users.end()
                                ? it->second
                                : std::string("$2y$10$000000000000000000000uJ0eV8gUIbPGtldchmqaP6YfD3x/aqnW");
  auto data = std::make_unique<crypt_data>();  // ~32 KiB: not on a server thread's stack
  const char* computed = crypt_r(password.c_str(), hash.c_str(), data.get());
  return it != config.basic_auth_users.end() && computed != nullptr && computed[0] != '*' && same(computed, hash);
}

}  // namespace gpureap::exporter
