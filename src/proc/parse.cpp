#include "proc/parse.hpp"

#include <algorithm>
#include <charconv>
#include <type_traits>

namespace gpureap::proc {
namespace {

// Calls fn(line) for each line ended by '\n' (the '\n' stripped); an
// unterminated tail is ignored (see the truncation rule in parse.hpp).
template <class Fn>
void for_each_whole_line(std::string_view text, Fn&& fn) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nl = text.find('\n', pos);
    if (nl == std::string_view::npos) return;
    fn(text.substr(pos, nl - pos));
    pos = nl + 1;
  }
}

// The whole of `s` must be the number; out-of-range or trailing junk → nullopt.
template <class T>
std::optional<T> to_number(std::string_view s) {
  static_assert(std::is_integral_v<T>);
  if (s.empty()) return std::nullopt;
  if constexpr (std::is_unsigned_v<T>) {
    if (s.front() == '-') return std::nullopt;  // "-1" must not become a huge uid
  }
  T value{};
  const char* first = s.data();
  const char* last = s.data() + s.size();
  auto [ptr, ec] = std::from_chars(first, last, value);
  if (ec != std::errc{} || ptr != last) return std::nullopt;
  return value;
}

// A pid is positive in every field we read except ppid/pgrp/session, which may be 0.
std::optional<pid_t> to_pid(std::string_view s) {
  auto v = to_number<pid_t>(s);
  if (!v || *v < 0) return std::nullopt;
  return v;
}

bool is_space(char c) { return c == ' ' || c == '\t'; }

std::string_view trim(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && (is_space(s.back()) || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

// First whitespace-separated token of s (s already trimmed at the front).
std::string_view first_token(std::string_view s) {
  std::size_t end = 0;
  while (end < s.size() && !is_space(s[end])) ++end;
  return s.substr(0, end);
}

// status "Name:" escapes only '\n' and '\\' (seq_escape_str with "\n\\").
std::string unescape_status_name(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      if (s[i + 1] == 'n') {
        out.push_back('\n');
        ++i;
        continue;
      }
      if (s[i + 1] == '\\') {
        out.push_back('\\');
        ++i;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

bool is_octal(char c) { return c >= '0' && c <= '7'; }

}  // namespace

std::optional<StatusInfo> parse_status(std::string_view text) {
  StatusInfo info;
  bool any = false;
  for_each_whole_line(text, [&](std::string_view line) {
    std::size_t colon = line.find(':');
    if (colon == std::string_view::npos) return;
    std::string_view key = line.substr(0, colon);
    std::string_view raw = line.substr(colon + 1);
    if (key == "Name") {
      // The kernel writes "Name:\t<comm>"; only that tab is format, the rest is the name.
      if (!raw.empty() && raw.front() == '\t') raw.remove_prefix(1);
      info.name = unescape_status_name(raw);
      any = true;
      return;
    }
    std::string_view value = trim(raw);
    if (key == "State") {
      if (!value.empty() && value.front() >= 'A' && value.front() <= 'z') {
        info.state = value.front();
        any = true;
      }
    } else if (key == "Tgid") {
      if (auto v = to_pid(value)) {
        info.tgid = v;
        any = true;
      }
    } else if (key == "PPid") {
      if (auto v = to_pid(value)) {
        info.ppid = v;
        any = true;
      }
    } else if (key == "Threads") {
      if (auto v = to_number<unsigned>(value)) {
        info.threads = v;
        any = true;
      }
    } else if (key == "Uid") {
      if (auto v = to_number<uid_t>(first_token(value))) {
        info.uid = v;
        any = true;
      }
    } else if (key == "NSpid") {
      std::vector<pid_t> ids;
      std::string_view rest = value;
      while (!rest.empty()) {
        std::string_view tok = first_token(rest);
        auto v = to_pid(tok);
        if (!v) return;  // one bad id makes the whole list untrustworthy
        ids.push_back(*v);
        rest = trim(rest.substr(tok.size()));
      }
      if (!ids.empty()) {
        info.nspid = std::move(ids);
        any = true;
      }
    }
  });
  if (!any) return std::nullopt;
  return info;
}

std::optional<unsigned> parse_loadavg_tasks(std::string_view text) {
  // Five space-separated fields on one line; the fourth is running/total.
  std::string_view rest = text;
  if (!rest.empty() && rest.back() == '\n') rest.remove_suffix(1);
  std::string_view fields[5];
  for (auto& f : fields) {
    rest = trim(rest);
    f = first_token(rest);
    if (f.empty()) return std::nullopt;
    rest.remove_prefix(f.size());
  }
  if (!trim(rest).empty()) return std::nullopt;
  const std::size_t slash = fields[3].find('/');
  if (slash == std::string_view::npos || !to_number<unsigned>(fields[3].substr(0, slash)) ||
      !to_number<pid_t>(fields[4]))
    return std::nullopt;
  return to_number<unsigned>(fields[3].substr(slash + 1));
}

std::optional<StatInfo> parse_stat(std::string_view text) {
  std::size_t open = text.find('(');
  std::size_t close = text.rfind(')');
  // comm may hold spaces and ')' itself: it ends at the LAST ')'.
  if (open == std::string_view::npos || close == std::string_view::npos || close < open) {
    return std::nullopt;
  }
  if (open < 2 || text[open - 1] != ' ') return std::nullopt;
  StatInfo st;
  auto pid = to_pid(text.substr(0, open - 1));
  if (!pid || *pid == 0) return std::nullopt;
  st.pid = *pid;
  st.comm = std::string(text.substr(open + 1, close - open - 1));

  // Fields 3.. follow ") ". tokens[k] is field k+3.
  std::string_view rest = text.substr(close + 1);
  if (rest.empty() || rest.front() != ' ') return std::nullopt;
  rest.remove_prefix(1);
  constexpr std::size_t kStartTimeIndex = 22 - 3;
  std::string_view tokens[kStartTimeIndex + 1];
  std::size_t pos = 0;
  for (std::size_t k = 0; k <= kStartTimeIndex; ++k) {
    std::size_t end = pos;
    while (end < rest.size() && rest[end] != ' ' && rest[end] != '\n') ++end;
    // Every field up to the start time must be followed by a delimiter: a
    // token that runs into the end of the text may have been cut short.
    if (end >= rest.size()) return std::nullopt;
    tokens[k] = rest.substr(pos, end - pos);
    if (rest[end] == '\n' && k < kStartTimeIndex) return std::nullopt;
    pos = end + 1;
  }
  if (tokens[0].size() != 1) return std::nullopt;
  st.state = tokens[0].front();
  auto ppid = to_pid(tokens[1]);
  auto pgrp = to_pid(tokens[2]);
  auto session = to_pid(tokens[3]);
  auto flags = to_number<std::uint32_t>(tokens[9 - 3]);
  auto start = to_number<std::uint64_t>(tokens[kStartTimeIndex]);
  if (!ppid || !pgrp || !session || !flags || !start) return std::nullopt;
  st.flags = *flags;
  st.ppid = *ppid;
  st.pgrp = *pgrp;
  st.session = *session;
  st.start_time = *start;
  return st;
}

std::vector<CgroupLine> parse_cgroup(std::string_view text) {
  std::vector<CgroupLine> out;
  for_each_whole_line(text, [&](std::string_view line) {
    std::size_t c1 = line.find(':');
    if (c1 == std::string_view::npos) return;
    std::size_t c2 = line.find(':', c1 + 1);
    if (c2 == std::string_view::npos) return;
    auto id = to_number<unsigned>(line.substr(0, c1));
    std::string_view path = line.substr(c2 + 1);
    if (!id || path.empty()) return;
    out.push_back(CgroupLine{*id, std::string(line.substr(c1 + 1, c2 - c1 - 1)), std::string(path)});
  });
  return out;
}

std::vector<CgroupLine> distinct_cgroup_paths(std::vector<CgroupLine> lines) {
  std::vector<CgroupLine> out;
  out.reserve(lines.size());
  for (auto& line : lines) {
    const bool memory_or_v2 = (line.hierarchy_id == 0 && line.controllers.empty()) ||
                              ("," + line.controllers + ",").find(",memory,") != std::string::npos;
    bool seen = false;
    for (const auto& kept : out) seen = seen || kept.path == line.path;
    if (memory_or_v2 || !seen) out.push_back(std::move(line));
  }
  out.shrink_to_fit();
  return out;
}

std::string unescape_octal(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size() && is_octal(s[i + 1]) && is_octal(s[i + 2]) &&
        is_octal(s[i + 3])) {
      int v = (s[i + 1] - '0') * 64 + (s[i + 2] - '0') * 8 + (s[i + 3] - '0');
      if (v <= 0xff) {
        out.push_back(static_cast<char>(static_cast<unsigned char>(v)));
        i += 3;
        continue;
      }
    }
    out.push_back(s[i]);
  }
  return out;
}

std::vector<MountInfo> parse_mountinfo(std::string_view text) {
  std::vector<MountInfo> out;
  for_each_whole_line(text, [&](std::string_view line) {
    // Fields are separated by single spaces; escapes guarantee no field holds one.
    std::vector<std::string_view> f;
    std::size_t pos = 0;
    for (;;) {
      std::size_t sp = line.find(' ', pos);
      f.push_back(line.substr(pos, sp == std::string_view::npos ? std::string_view::npos : sp - pos));
      if (sp == std::string_view::npos) break;
      pos = sp + 1;
    }
    // Optional fields ("shared:1", "master:2") sit between field 6 and the " - ".
    std::size_t sep = 6;
    while (sep < f.size() && f[sep] != "-") ++sep;
    if (sep >= f.size() || f.size() - sep < 4) return;
    std::string_view devno = f[2];
    std::size_t colon = devno.find(':');
    if (colon == std::string_view::npos) return;
    auto id = to_number<unsigned>(f[0]);
    auto parent = to_number<unsigned>(f[1]);
    auto major = to_number<unsigned>(devno.substr(0, colon));
    auto minor = to_number<unsigned>(devno.substr(colon + 1));
    if (!id || !parent || !major || !minor || f[3].empty() || f[4].empty() || f[sep + 1].empty()) {
      return;
    }
    MountInfo m;
    m.mount_id = *id;
    m.parent_id = *parent;
    m.major = *major;
    m.minor = *minor;
    m.root = unescape_octal(f[3]);
    m.mount_point = unescape_octal(f[4]);
    m.options = std::string(f[5]);
    m.fs_type = std::string(f[sep + 1]);
    m.source = unescape_octal(f[sep + 2]);
    m.super_options = std::string(f[sep + 3]);
    out.push_back(std::move(m));
  });
  return out;
}

Argv parse_cmdline(std::string_view text, const Argv& like) {
  return Argv::from_text(text, like);
}

std::vector<std::pair<std::string, std::string>> parse_environ(std::string_view text,
                                                               const std::vector<std::string>& keys) {
  std::vector<std::pair<std::string, std::string>> out;
  if (keys.empty()) return out;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t nul = text.find('\0', pos);
    if (nul == std::string_view::npos) break;  // cut entry: dropped
    std::string_view entry = text.substr(pos, nul - pos);
    pos = nul + 1;
    std::size_t eq = entry.find('=');
    if (eq == std::string_view::npos || eq == 0) continue;
    std::string_view key = entry.substr(0, eq);
    bool wanted = false;
    for (const auto& k : keys) wanted = wanted || k == key;
    if (!wanted) continue;
    bool seen = false;
    for (const auto& kv : out) seen = seen || kv.first == key;
    if (seen) continue;
    out.emplace_back(std::string(key), std::string(entry.substr(eq + 1)));
  }
  return out;
}

std::vector<std::pair<unsigned, std::string>> parse_char_devices(std::string_view text) {
  std::vector<std::pair<unsigned, std::string>> out;
  bool in_char = false;
  for_each_whole_line(text, [&](std::string_view line) {
    if (line == "Character devices:") {
      in_char = true;
      return;
    }
    if (!in_char) return;
    std::string_view t = trim(line);
    if (t.empty() || t.back() == ':') {  // blank line or "Block devices:" ends the section
      in_char = false;
      return;
    }
    std::string_view num = first_token(t);
    std::string_view name = trim(t.substr(num.size()));
    auto major = to_number<unsigned>(num);
    if (!major || name.empty()) return;
    out.emplace_back(*major, std::string(name));
  });
  return out;
}

std::vector<std::string> parse_mapped_files(std::string_view text) {
  std::vector<std::string> out;
  for_each_whole_line(text, [&](std::string_view line) {
    // Five fields, then spaces padding the path to a column.
    std::string_view rest = line;
    for (int field = 0; field < 5; ++field) {
      rest = trim(rest);
      const std::string_view token = first_token(rest);
      if (token.empty()) return;
      rest.remove_prefix(token.size());
    }
    while (!rest.empty() && is_space(rest.front())) rest.remove_prefix(1);
    if (rest.empty() || rest.front() != '/') return;  // no file: anonymous or [special]
    if (std::find(out.begin(), out.end(), rest) == out.end()) out.emplace_back(rest);
  });
  return out;
}

}  // namespace gpureap::proc
