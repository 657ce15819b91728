#include "lab/ids.hpp"

#include <random>

namespace gpureap::lab {

std::string random_hex(std::size_t n) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::random_device rd;
  std::string s;
  s.reserve(n);
  for (std::size_t i = 0; i < n; ++i) s.push_back(kHex[rd() % 16]);
  return s;
}

std::string random_uuid() {
  std::string h = random_hex(32);
  h[12] = '4';                                 // version 4
  h[16] = "89ab"[std::random_device{}() % 4];  // RFC 4122 variant
  return h.substr(0, 8) + "-" + h.substr(8, 4) + "-" + h.substr(12, 4) + "-" + h.substr(16, 4) +
         "-" + h.substr(20, 12);
}

}  // namespace gpureap::lab
