/* Debian 12's civetweb 1.15 loads libssl with dlopen("libssl.so") and calls
 * SSL_get_peer_certificate on every TLS connection; OpenSSL 3 no longer
 * exports that name (it is a macro for SSL_get1_peer_certificate), so the
 * call goes through a null pointer. This library has the SONAME libssl.so:
 * loaded first (tls_shim.cpp), it is what civetweb's dlopen finds, and every
 * other name civetweb looks up resolves in its dependency, the real libssl.so.3. */
#include <openssl/ssl.h>

#undef SSL_get_peer_certificate
X509* SSL_get_peer_certificate(const SSL* ssl);

__attribute__((visibility("default"))) X509* SSL_get_peer_certificate(const SSL* ssl) {
  return SSL_get1_peer_certificate(ssl);
}
