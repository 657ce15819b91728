// A whole string_view as a number: no sign games, no trailing text, no
// overflow (from_chars), nullopt otherwise. Shared by the readers of pids,
// byte counts and namespace inodes.
#pragma once

#include <charconv>
#include <optional>
#include <string_view>
#include <system_error>

namespace gpureap::sys {

template <class T>
std::optional<T> parse_number(std::string_view s) {
  T v{};
  if (s.empty()) return std::nullopt;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc{} || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace gpureap::sys
