#include <fmt/chrono.h>
#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string_view>
#include <type_traits>

#include "gpu/snapshot_json.hpp"
#include "report/report.hpp"

namespace gpureap::report {

namespace {

using nlohmann::json;

json nullable(const std::optional<std::uint64_t>& v) {
  return v ? json(*v) : json(nullptr);
}

json container_json(const node::ProcessRecord& r) {
  if (!r.container) return nullptr;
  const auto& c = *r.container;
  json out = {{"id", c.ref.id},
              {"runtime", container::to_string(c.ref.runtime)},
              {"name", c.meta ? json(c.meta->container_name) : json(nullptr)},
              {"deleted", c.deleted},
              {"source", c.meta ? json(c.meta->source) : json(nullptr)}};
  return out;
}

json pod_json(const node::ProcessRecord& r) {
  if (!r.container) return nullptr;
  const auto& c = *r.container;
  auto str_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return {
      {"name", c.meta ? str_or_null(c.meta->pod_name) : json(nullptr)},
      {"namespace", c.meta ? str_or_null(c.meta->pod_namespace) : json(nullptr)},
      {"uid", str_or_null(c.meta && !c.meta->pod_uid.empty() ? c.meta->pod_uid : c.ref.pod_uid)},
      {"qos", container::to_string(c.ref.qos)}};
}

json process_json(const node::NodeSnapshot& snap, const node::ProcessRecord& r) {
  const auto& p = r.process;
  json devices = json::array();
  for (const auto& d : p.gpu_fds) devices.push_back({{"device", d.device}, {"fds", d.count}});
  json listings = json::array();
  for (std::size_t i : r.listings) {
    const auto& l = snap.listings[i];
    listings.push_back({{"gpu", l.device_index},
                        {"driver_pid", l.entry.pid},
                        {"pid_match", node::to_string(l.match)},
                        {"used_memory", nullable(l.entry.used_memory)}});
  }
  json cmd = json::array();
  for (const auto& a : p.cmdline) cmd.push_back(a);
  return {{"pid", p.pid},
          {"ns_pid", p.local_pid()},
          {"nspid", p.nspid},
          {"ppid", p.ppid},
          {"pgid", p.pgrp},
          {"sid", p.session},
          {"uid", p.uid},
          {"state", std::string(1, p.state)},
          {"comm", p.comm},
          {"cmdline", cmd},
          {"gpu_memory", nullable(snap.gpu_memory(r))},
          {"listed", r.listed()},
          {"listings", listings},
          {"devices", devices},
          {"container", container_json(r)},
          {"pod", pod_json(r)}};
}

// nccl_missing_rank's job: identity, the local ranks present and missing, the survivors.
json nccl_group_json(const findings::NcclGroup& g) {
  auto str_or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  auto int_or_null = [](const std::optional<int>& v) { return v ? json(*v) : json(nullptr); };
  json survivors = json::array();
  for (const auto& s : g.survivors) {
    survivors.push_back({{"pid", s.pid},
                         {"comm", s.comm},
                         {"rank", int_or_null(s.rank)},
                         {"local_rank", s.local_rank},
                         {"gpu_memory", nullable(s.gpu_memory)},
                         {"gpus", s.gpus},
                         {"watchdog", findings::to_string(s.watchdog)},
                         {"watchdog_env", s.watchdog_env},
                         {"watchdog_detail", s.watchdog_detail}});
  }
  return {{"scope", g.scope},
          {"run_id", str_or_null(g.run_id)},
          {"master_addr", str_or_null(g.master_addr)},
          {"master_port", int_or_null(g.master_port)},
          {"world_size", int_or_null(g.world_size)},
          {"group_rank", int_or_null(g.group_rank)},
          {"local_world_size", g.local_world_size},
          {"local_world_size_source", g.local_world_size_source},
          {"present_local_ranks", g.present_local_ranks},
          {"missing_local_ranks", g.missing_local_ranks},
          {"zombie_pids", g.zombie_pids},
          {"survivors", survivors},
          {"survivor_memory", g.survivor_memory},
          {"watchdog", g.watchdog}};
}

}  // namespace

namespace {

// ---- the direct writer: the text nlohmann would dump, without building the tree.
// A node of thousands of GPU processes spends most of `trace --json` building
// one std::map per object otherwise (20-40 ms for 2,000 on the H200 machine).

// The length of the well-formed UTF-8 sequence at the start of `s` (RFC 3629:
// no overlong forms, no surrogates, nothing past U+10FFFF), 0 if it is not one.
std::size_t utf8_sequence(std::string_view s) {
  const auto byte = [&s](std::size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = byte(0);
  std::size_t len = 0;
  unsigned char low = 0x80;  // the second byte's range, narrowed where the lead needs it
  unsigned char high = 0xBF;
  if (lead >= 0xC2 && lead <= 0xDF) {
    len = 2;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    len = 3;
    if (lead == 0xE0) low = 0xA0;   // overlong
    if (lead == 0xED) high = 0x9F;  // surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    len = 4;
    if (lead == 0xF0) low = 0x90;   // overlong
    if (lead == 0xF4) high = 0x8F;  // past U+10FFFF
  } else {
    return 0;
  }
  if (s.size() < len || byte(1) < low || byte(1) > high) return 0;
  for (std::size_t i = 2; i < len; ++i) {
    if (byte(i) < 0x80 || byte(i) > 0xBF) return 0;
  }
  return len;
}

// The text the writers below append to: a std::string whose size runs
// ahead of what is written, so that an append is a bounds check and a copy
// inlined here (std::string's own append and push_back are calls into the
// library, about sixty for each process). Its string gets its final size
// back when it goes.
class Text {
 public:
  explicit Text(std::string& text) : text_(text), used_(text.size()) {}
  Text(const Text&) = delete;
  Text& operator=(const Text&) = delete;
  ~Text() { text_.resize(used_); }

  void append(const char* p, std::size_t n) {
    if (n == 0) return;  // p may be an empty view's nullptr, which memcpy must not get
    std::memcpy(room(n), p, n);
    used_ += n;
  }
  Text& operator+=(std::string_view s) {
    append(s.data(), s.size());
    return *this;
  }
  Text& operator+=(char c) {
    *room(1) = c;
    ++used_;
    return *this;
  }
  [[nodiscard]] std::size_t size() const { return used_; }
  void truncate(std::size_t n) { used_ = n; }
  // At least n bytes to write at the end, then advance(k) for the k written.
  char* room(std::size_t n) {
    if (text_.size() - used_ < n) [[unlikely]]
      text_.resize(std::max(used_ + n, 2 * text_.size() + 256));
    return text_.data() + used_;
  }
  void advance(std::size_t n) { used_ += n; }
  // What is written so far, handed over and forgotten (the pieces of a
  // document written as they fill).
  template <class Fn>
  void drain(Fn&& write) {
    write(std::string_view(text_.data(), used_));
    used_ = 0;
  }

 private:
  std::string& text_;
  std::size_t used_;
};

// Whether the eight bytes at p are all printable ASCII other than '"' and
// '\\' (copied as they are). Word tricks with no false "yes": a byte below
// 0x20, a quote, a backslash or a byte from 0x80 each make it "no".
bool plain_word(const char* p) {
  std::uint64_t w = 0;
  std::memcpy(&w, p, sizeof w);
  constexpr std::uint64_t kOnes = 0x0101010101010101ULL;
  constexpr std::uint64_t kHigh = 0x8080808080808080ULL;
  const auto has_zero = [](std::uint64_t v) { return (v - kOnes) & ~v & kHigh; };
  const std::uint64_t below_space = (w - kOnes * 0x20) & ~w & kHigh;
  return ((w & kHigh) | below_space | has_zero(w ^ (kOnes * '"')) | has_zero(w ^ (kOnes * '\\'))) ==
         0;
}

// As nlohmann's dump(-1, ' ', false, replace) writes it, byte for byte: the
// short escapes, \u00xx for the other control characters, UTF-8 as it is.
// Ill-formed UTF-8 (rare: its replacement characters) is left to nlohmann.
// The hidden-holder messages' "×" sent every one of them there before.
void put_string(Text& out, std::string_view s) {
  const std::size_t start = out.size();
  out += '"';
  std::size_t plain = 0;  // start of the bytes not yet copied
  for (std::size_t i = 0; i < s.size();) {
    // The usual text (command lines, names, messages) eight bytes at a time.
    while (s.size() - i >= 8 && plain_word(s.data() + i)) i += 8;
    if (i == s.size()) break;
    const auto c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const std::size_t len = utf8_sequence(s.substr(i));
      if (len == 0) {
        out.truncate(start);
        out += json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
        return;
      }
      i += len;
      continue;
    }
    if (c >= 0x20 && c != '"' && c != '\\') {
      ++i;
      continue;
    }
    out += s.substr(plain, i - plain);
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\f':
        out += "\\f";
        break;
      case '\r':
        out += "\\r";
        break;
      default: {
        constexpr std::string_view kHex = "0123456789abcdef";
        out += "\\u00";
        out += kHex[c >> 4];
        out += kHex[c & 0xF];
      }
    }
    plain = ++i;
  }
  out += s.substr(plain);
  out += '"';
}

template <class T>
void put_number(Text& out, T v) {
  static_assert(std::is_integral_v<T>, "integers only: nlohmann writes floating point its own way");
  constexpr std::size_t kDigits = 24;
  char* at = out.room(kDigits);
  out.advance(static_cast<std::size_t>(std::to_chars(at, at + kDigits, v).ptr - at));
}

template <class T>
void put_number_or_null(Text& out, const std::optional<T>& v) {
  if (v) {
    put_number(out, *v);
  } else {
    out += "null";
  }
}

template <class T>
void put_numbers(Text& out, const std::vector<T>& v) {
  out += '[';
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    put_number(out, v[i]);
  }
  out += ']';
}

// A member's key as one piece of text made at compile time: `,"name":` after
// another member, `{"name":` opening an object. Three appends per key (about
// 25 keys per process) were a good part of the writer's time.
template <std::size_t N>
struct JsonKey {
  std::array<char, N + 3> text{};  // N counts the literal's NUL: lead, quotes and colon added
  consteval JsonKey(const char (&name)[N]) {  // implicit: the literal is the key
    text[1] = '"';
    for (std::size_t i = 0; i + 1 < N; ++i) text[i + 2] = name[i];
    text[N + 1] = '"';
    text[N + 2] = ':';
  }
};

template <char Lead, JsonKey Key>
inline constexpr auto kKeyText = [] {
  auto text = Key.text;
  text[0] = Lead;
  return text;
}();

template <JsonKey Key>
void put_key(Text& out) {
  out.append(kKeyText<',', Key>.data(), kKeyText<',', Key>.size());
}

// Opens an object with its first member's key.
template <JsonKey Key>
void open_object(Text& out) {
  out.append(kKeyText<'{', Key>.data(), kKeyText<'{', Key>.size());
}

// Keys in nlohmann's (std::map) order, so the text is byte for byte json_text(process_json).
void put_process(Text& out, const node::NodeSnapshot& snap, const node::ProcessRecord& r) {
  const auto& p = r.process;
  open_object<"cmdline">(out);
  out += '[';
  bool first = true;
  for (std::string_view a : p.cmdline) {
    if (!first) out += ',';
    first = false;
    put_string(out, a);
  }
  out += ']';
  put_key<"comm">(out);
  put_string(out, p.comm);
  put_key<"container">(out);
  const auto* c = r.container.get();
  if (c == nullptr) {
    out += "null";
  } else {
    open_object<"deleted">(out);
    out += c->deleted ? "true" : "false";
    put_key<"id">(out);
    put_string(out, c->ref.id);
    put_key<"name">(out);
    if (c->meta) {
      put_string(out, c->meta->container_name);
    } else {
      out += "null";
    }
    put_key<"runtime">(out);
    put_string(out, container::to_string(c->ref.runtime));
    put_key<"source">(out);
    if (c->meta) {
      put_string(out, c->meta->source);
    } else {
      out += "null";
    }
    out += '}';
  }
  put_key<"devices">(out);
  out += '[';
  for (std::size_t i = 0; i < p.gpu_fds.size(); ++i) {
    if (i) out += ',';
    open_object<"device">(out);
    put_string(out, p.gpu_fds[i].device);
    put_key<"fds">(out);
    put_number(out, p.gpu_fds[i].count);
    out += '}';
  }
  out += ']';
  put_key<"gpu_memory">(out);
  put_number_or_null(out, snap.gpu_memory(r));
  put_key<"listed">(out);
  out += r.listed() ? "true" : "false";
  put_key<"listings">(out);
  out += '[';
  for (std::size_t i = 0; i < r.listings.size(); ++i) {
    const auto& l = snap.listings[r.listings[i]];
    if (i) out += ',';
    open_object<"driver_pid">(out);
    put_number(out, l.entry.pid);
    put_key<"gpu">(out);
    put_number(out, l.device_index);
    put_key<"pid_match">(out);
    put_string(out, node::to_string(l.match));
    put_key<"used_memory">(out);
    put_number_or_null(out, l.entry.used_memory);
    out += '}';
  }
  out += ']';
  put_key<"ns_pid">(out);
  put_number(out, p.local_pid());
  put_key<"nspid">(out);
  put_numbers(out, p.nspid);
  put_key<"pgid">(out);
  put_number(out, p.pgrp);
  put_key<"pid">(out);
  put_number(out, p.pid);
  put_key<"pod">(out);
  if (c == nullptr) {
    out += "null";
  } else {
    auto str_or_null = [&out](const std::string& v) {
      if (v.empty()) {
        out += "null";
      } else {
        put_string(out, v);
      }
    };
    open_object<"name">(out);
    if (c->meta) {
      str_or_null(c->meta->pod_name);
    } else {
      out += "null";
    }
    put_key<"namespace">(out);
    if (c->meta) {
      str_or_null(c->meta->pod_namespace);
    } else {
      out += "null";
    }
    put_key<"qos">(out);
    put_string(out, container::to_string(c->ref.qos));
    put_key<"uid">(out);
    str_or_null(c->meta && !c->meta->pod_uid.empty() ? c->meta->pod_uid : c->ref.pod_uid);
    out += '}';
  }
  put_key<"ppid">(out);
  put_number(out, p.ppid);
  put_key<"sid">(out);
  put_number(out, p.session);
  put_key<"state">(out);
  put_string(out, std::string_view(&p.state, 1));
  put_key<"uid">(out);
  put_number(out, p.uid);
  out += '}';
}

}  // namespace

void append_process_json(std::string& out, const node::NodeSnapshot& snap,
                         const node::ProcessRecord& r) {
  Text text(out);
  put_process(text, snap, r);
}

std::string process_json_text(const node::NodeSnapshot& snap, const node::ProcessRecord& r) {
  std::string out;
  append_process_json(out, snap, r);
  return out;
}

namespace {

bool names_holders(const findings::Finding& f) {
  return f.kind == findings::Kind::orphaned_context ||
         f.kind == findings::Kind::latent_orphaned_context;
}

json finding_json(const findings::Finding& f) {
  json one = {{"kind", findings::to_string(f.kind)},
              {"severity", findings::to_string(f.severity)},
              {"pid", f.pid ? json(*f.pid) : json(nullptr)},
              {"gpu", f.device ? json(*f.device) : json(nullptr)},
              {"message", f.message},
              {"advice", f.advice}};
  if (f.kind == findings::Kind::zombie) one["pids"] = f.pids;
  if (names_holders(f)) {
    json holders = json::array();
    for (const auto& h : f.holders) {
      holders.push_back({{"pid", h.pid}, {"comm", h.comm}, {"reason", h.reason}});
    }
    one["holders"] = holders;
  }
  json related = json::array();
  for (const auto& r : f.related) {
    related.push_back({{"kind", findings::to_string(r.kind)},
                       {"severity", findings::to_string(r.severity)},
                       {"pid", r.pid ? json(*r.pid) : json(nullptr)},
                       {"message", r.message}});
  }
  one["related"] = related;
  if (f.group) one["group"] = nccl_group_json(*f.group);
  return one;
}

// Keys in nlohmann's (std::map) order, so the text is byte for byte json_text(finding_json).
void put_finding(Text& out, const findings::Finding& f) {
  if (f.group) {  // a few per node: the tree is fine
    out += json_text(finding_json(f), -1);
    return;
  }
  open_object<"advice">(out);
  put_string(out, f.advice);
  put_key<"gpu">(out);
  put_number_or_null(out, f.device);
  if (names_holders(f)) {
    put_key<"holders">(out);
    out += '[';
    for (std::size_t i = 0; i < f.holders.size(); ++i) {
      const auto& h = f.holders[i];
      if (i > 0) out += ',';
      open_object<"comm">(out);
      put_string(out, h.comm);
      put_key<"pid">(out);
      put_number(out, h.pid);
      put_key<"reason">(out);
      put_string(out, h.reason);
      out += '}';
    }
    out += ']';
  }
  put_key<"kind">(out);
  put_string(out, findings::to_string(f.kind));
  put_key<"message">(out);
  put_string(out, f.message);
  put_key<"pid">(out);
  put_number_or_null(out, f.pid);
  if (f.kind == findings::Kind::zombie) {
    put_key<"pids">(out);
    put_numbers(out, f.pids);
  }
  put_key<"related">(out);
  out += '[';
  for (std::size_t i = 0; i < f.related.size(); ++i) {
    const auto& r = f.related[i];
    if (i > 0) out += ',';
    open_object<"kind">(out);
    put_string(out, findings::to_string(r.kind));
    put_key<"message">(out);
    put_string(out, r.message);
    put_key<"pid">(out);
    put_number_or_null(out, r.pid);
    put_key<"severity">(out);
    put_string(out, findings::to_string(r.severity));
    out += '}';
  }
  out += ']';
  put_key<"severity">(out);
  put_string(out, findings::to_string(f.severity));
  out += '}';
}

}  // namespace

void append_finding_json(std::string& out, const findings::Finding& f) {
  Text text(out);
  put_finding(text, f);
}

std::string finding_json_text(const findings::Finding& f) {
  std::string out;
  append_finding_json(out, f);
  return out;
}

namespace {

// The processes a trace shows: every GPU-related one, and every one a finding
// names (zombies, orphans). Not gpureap itself.
std::vector<const node::ProcessRecord*> shown_processes(
    const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found) {
  std::vector<pid_t> named;  // sorted: a node's thousands of findings, one node each in a set
  named.reserve(found.size());
  for (const auto& f : found) {
    if (f.pid) named.push_back(*f.pid);
  }
  std::sort(named.begin(), named.end());
  std::vector<const node::ProcessRecord*> out;
  for (const auto& r : snap.records) {
    if (r.process.pid == snap.self_pid) continue;
    if (gpu_related(r) || std::binary_search(named.begin(), named.end(), r.process.pid))
      out.push_back(&r);
  }
  return out;
}

// The small members of the document, in order, around the two large arrays.
json head_json(const node::NodeSnapshot& snap) {
  json gpu = gpu::snapshot_to_json(snap.gpu);
  gpu["backend"] = snap.gpu_backend;
  if (!snap.gpu_unavailable_reason.empty()) gpu["unavailable_reason"] = snap.gpu_unavailable_reason;
  return {
      {"schema", kJsonSchema},
      {"taken_at", fmt::format("{:%Y-%m-%dT%H:%M:%S}Z",
                               fmt::gmtime(std::chrono::system_clock::to_time_t(snap.taken_at)))},
      {"host_root", snap.host_root},
      {"gpu", gpu}};
}

json tail_json(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found) {
  json dead = json::array();
  for (const auto& l : snap.listings) {
    if (!node::names_gone_process(l.match)) continue;
    json now = nullptr;  // the process that has the PID now, for a stale listing
    if (const proc::Process* p = snap.pid_now(l)) {
      now = {{"comm", p->comm}, {"state", std::string(1, p->state)}};
    }
    dead.push_back({{"gpu", l.device_index},
                    {"pid", l.entry.pid},
                    {"used_memory", nullable(l.entry.used_memory)},
                    {"pid_match", node::to_string(l.match)},
                    {"pid_now", now}});
  }
  const Summary s = summarize(snap, found);
  return {{"dead_listed", dead},
          {"summary",
           {{"gpu_processes", s.gpu_processes},
            {"listed", s.listed},
            {"hidden", s.hidden},
            {"dead_listed", s.dead_listed},
            {"zombies", s.zombies},
            {"orphans", s.orphans},
            {"findings", s.findings},
            {"related", s.related},
            {"clean", s.findings == 0}}},
          {"scan",
           {{"listed", snap.scan_stats.listed},
            {"scanned", snap.scan_stats.scanned},
            {"vanished", snap.scan_stats.vanished},
            {"denied", snap.scan_stats.denied},
            {"malformed", snap.scan_stats.malformed},
            {"fds_denied", snap.scan_stats.fds_denied},
            {"fds_from", snap.scan_stats.fds_from},
            {"fds_loader", snap.scan_stats.fds_loader},
            {"fds_note", snap.scan_stats.fds_note},
            {"fds_pin", snap.scan_stats.fds_pin}}}};
}

}  // namespace

json trace_json(const node::NodeSnapshot& snap, const std::vector<findings::Finding>& found) {
  json doc = head_json(snap);
  json processes = json::array();
  for (const auto* r : shown_processes(snap, found)) processes.push_back(process_json(snap, *r));
  doc["processes"] = std::move(processes);
  json fs = json::array();
  for (const auto& f : found) fs.push_back(finding_json(f));
  doc["findings"] = std::move(fs);
  json tail = tail_json(snap, found);  // items() of a temporary would dangle
  for (auto& [key, value] : tail.items()) doc[key] = std::move(value);
  return doc;
}

bool write_trace_json(std::FILE* out, const node::NodeSnapshot& snap,
                      const std::vector<findings::Finding>& found) {
  // The same document as trace_json, written member by member with one process
  // or finding per line, so a node of thousands of processes never holds the
  // whole tree or its text (the memory target is 10 MiB).
  // Written in 64 KiB pieces, a pipe's capacity: through stdio's own buffer
  // (4 KiB for a pipe) a 2 MB document took ~430 write(2) calls.
  constexpr std::size_t kPiece = std::size_t{64} * 1024;
  bool ok = true;
  std::string buffer;
  Text pending(buffer);
  (void)pending.room(2 * kPiece);  // a piece and the element that fills it
  auto write_pending = [out, &ok, &pending] {
    pending.drain([&](std::string_view text) {
      ok = ok && std::fwrite(text.data(), 1, text.size(), out) == text.size();
    });
  };
  auto put = [&](const std::string& text) {
    if (pending.size() + text.size() > kPiece) write_pending();
    if (text.size() >= kPiece) {
      ok = ok && std::fwrite(text.data(), 1, text.size(), out) == text.size();
    } else {
      pending += text;
    }
  };
  auto member = [&](const std::string& key, const json& value, bool last) {
    put(fmt::format("  {}: {}{}\n", json(key).dump(), json_text(value, -1), last ? "" : ","));
  };
  put("{\n");
  const json head = head_json(snap);
  for (const auto& [key, value] : head.items()) member(key, value, false);
  // The elements are written straight into the piece, not each into a string
  // of its own first: thousands of them.
  auto array = [&](const char* key, std::size_t n, const auto& append_element) {
    put(fmt::format("  \"{}\": [", key));
    for (std::size_t i = 0; i < n; ++i) {
      pending += i ? ",\n    " : "\n    ";
      append_element(pending, i);
      if (pending.size() >= kPiece) write_pending();
    }
    put(n ? "\n  ],\n" : "],\n");
  };
  const auto shown = shown_processes(snap, found);
  array("processes", shown.size(),
        [&](Text& text, std::size_t i) { put_process(text, snap, *shown[i]); });
  array("findings", found.size(), [&](Text& text, std::size_t i) { put_finding(text, found[i]); });
  const json tail = tail_json(snap, found);
  std::size_t left = tail.size();
  for (const auto& [key, value] : tail.items()) member(key, value, --left == 0);
  put("}\n");
  write_pending();
  return ok && std::fflush(out) == 0;
}

bool write_text(std::FILE* out, const std::string& text) {
  return std::fwrite(text.data(), 1, text.size(), out) == text.size() && std::fflush(out) == 0;
}

std::string json_text(const nlohmann::json& doc, int indent) {
  return doc.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace gpureap::report
