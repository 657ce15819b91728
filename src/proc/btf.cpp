#include "proc/btf.hpp"

#include <algorithm>
#include <cstring>

namespace gpureap::proc {
namespace {

// include/uapi/linux/btf.h, restated: the layout is ABI.
constexpr std::uint16_t kMagic = 0xeB9F;
constexpr std::size_t kHeaderSize = 24;  // magic..str_len; hdr_len may be larger
constexpr std::size_t kTypeSize = 12;    // name_off, info, size/type
enum Kind : unsigned {
  kInt = 1,
  kPtr,
  kArray,
  kStruct,
  kUnion,
  kEnum,
  kFwd,
  kTypedef,
  kVolatile,
  kConst,
  kRestrict,
  kFunc,
  kFuncProto,
  kVar,
  kDatasec,
  kFloat,
  kDeclTag,
  kTypeTag,
  kEnum64,
};

// Bytes that follow a btf_type record of this kind, or -1 for an unknown kind
// (a newer kernel: its size cannot be guessed, so the walk must stop).
long trailing_bytes(unsigned kind, unsigned vlen) {
  switch (kind) {
    case kInt:
    case kVar:
    case kDeclTag:
      return 4;
    case kArray:
      return 12;
    case kStruct:
    case kUnion:
    case kDatasec:
    case kEnum64:
      return 12L * vlen;
    case kEnum:
    case kFuncProto:
      return 8L * vlen;
    case kPtr:
    case kFwd:
    case kTypedef:
    case kVolatile:
    case kConst:
    case kRestrict:
    case kFunc:
    case kFloat:
    case kTypeTag:
      return 0;
    default:
      return -1;
  }
}

// Sequential reads over one section through a 64 KiB window.
class Stream {
 public:
  Stream(const ReadAt& read, std::uint64_t begin, std::uint64_t length)
      : read_(read), pos_(begin), end_(begin + length) {}

  // Copies the next n bytes to out; false at the section's end or on a read error.
  bool take(void* out, std::size_t n) {
    char* dst = static_cast<char*>(out);
    while (n > 0) {
      if (at_ == have_ && !refill()) return false;
      std::size_t k = std::min(n, have_ - at_);
      std::memcpy(dst, window_.data() + at_, k);
      at_ += k;
      dst += k;
      n -= k;
    }
    return true;
  }
  bool skip(std::uint64_t n) {
    while (n > 0) {
      if (at_ == have_ && !refill()) return false;
      std::size_t k = static_cast<std::size_t>(std::min<std::uint64_t>(n, have_ - at_));
      at_ += k;
      n -= k;
    }
    return true;
  }
  // The unread rest of the window (refilled when empty), consumed whole.
  bool next_chunk(const char*& data, std::size_t& n) {
    if (at_ == have_ && !refill()) return false;
    data = window_.data() + at_;
    n = have_ - at_;
    at_ = have_;
    return true;
  }
  [[nodiscard]] bool done() const { return at_ == have_ && pos_ >= end_; }
  [[nodiscard]] int error() const { return error_; }

 private:
  bool refill() {
    if (pos_ >= end_) return false;
    std::size_t want =
        static_cast<std::size_t>(std::min<std::uint64_t>(window_.size(), end_ - pos_));
    ssize_t n = read_(pos_, window_.data(), want);
    if (n <= 0) {
      error_ = n < 0 ? errno : 0;
      return false;
    }
    pos_ += static_cast<std::uint64_t>(n);
    at_ = 0;
    have_ = static_cast<std::size_t>(n);
    return true;
  }

  const ReadAt& read_;
  std::uint64_t pos_;
  std::uint64_t end_;
  std::vector<char> window_ = std::vector<char>(65536);
  std::size_t at_ = 0;
  std::size_t have_ = 0;
  int error_ = 0;
};

std::uint32_t u32_at(const unsigned char* p) {
  std::uint32_t v = 0;
  std::memcpy(&v, p, sizeof v);
  return v;
}

sys::Error bad(const std::string& what, const std::string& why) {
  return sys::Error{EBADMSG, what + ": " + why};
}

}  // namespace

sys::Result<BtfAnswer> query_btf(const ReadAt& read, const BtfQuery& query,
                                 const std::string& what) {
  unsigned char header[kHeaderSize];
  ssize_t got = read(0, reinterpret_cast<char*>(header), sizeof header);
  if (got < 0) return sys::errno_error(errno, "read " + what);
  if (static_cast<std::size_t>(got) < sizeof header) return bad(what, "shorter than a BTF header");
  std::uint16_t magic = 0;
  std::memcpy(&magic, header, sizeof magic);
  if (magic != kMagic) return bad(what, "not BTF (bad magic)");
  const std::uint32_t hdr_len = u32_at(header + 4);
  const std::uint32_t type_off = u32_at(header + 8);
  const std::uint32_t type_len = u32_at(header + 12);
  const std::uint32_t str_off = u32_at(header + 16);
  const std::uint32_t str_len = u32_at(header + 20);
  if (hdr_len < kHeaderSize) return bad(what, "header length " + std::to_string(hdr_len));

  // Pass 1: the string section, for the offsets of the names asked for. BTF
  // strings are deduplicated, so each name has at most one offset.
  std::vector<std::string> names;
  for (const auto& [s, m] : query.members) {
    names.push_back(s);
    names.push_back(m);
  }
  for (const auto& f : query.funcs) names.push_back(f);
  std::sort(names.begin(), names.end());
  names.erase(std::unique(names.begin(), names.end()), names.end());
  std::size_t longest = 0;
  for (const auto& n : names) longest = std::max(longest, n.size());
  std::map<std::string, std::uint32_t> name_off;
  {
    Stream strings(read, std::uint64_t{hdr_len} + str_off, str_len);
    std::string current;
    bool too_long = false;
    std::uint32_t start = 0;
    std::uint32_t pos = 0;
    // Whole strings are found with memchr and looked up only when short
    // enough to be a name asked for; a string cut by the window's edge is
    // carried over (at most `longest` bytes of it).
    const char* chunk = nullptr;
    std::size_t n = 0;
    // Most of the 100k+ strings are rejected by their length alone.
    std::vector<std::vector<const std::string*>> by_length(longest + 1);
    for (const auto& name : names) by_length[name.size()].push_back(&name);
    auto consider = [&](std::string_view str, std::uint32_t at) {
      if (str.size() > longest) return;
      for (const std::string* name : by_length[str.size()]) {
        if (str == *name) name_off.emplace(*name, at);
      }
    };
    while (strings.next_chunk(chunk, n)) {
      std::size_t i = 0;
      while (i < n) {
        const void* nul = std::memchr(chunk + i, '\0', n - i);
        if (nul == nullptr) {  // the string goes on in the next window
          if (!too_long) {
            current.append(chunk + i,
                           std::min(n - i, longest + 1 - std::min(current.size(), longest + 1)));
            too_long = current.size() > longest;
          }
          pos += static_cast<std::uint32_t>(n - i);
          break;
        }
        const auto len = static_cast<std::size_t>(static_cast<const char*>(nul) - (chunk + i));
        if (current.empty() && !too_long) {
          consider(std::string_view(chunk + i, len), start);
        } else if (!too_long && current.size() + len <= longest) {
          current.append(chunk + i, len);
          consider(current, start);
        }
        current.clear();
        too_long = false;
        pos += static_cast<std::uint32_t>(len + 1);
        start = pos;
        i += len + 1;
      }
    }
    if (strings.error() != 0) return sys::errno_error(strings.error(), "read " + what);
    if (!strings.done()) return bad(what, "string section runs past the end of the file");
  }
  // Each name's string offset, looked up once: 0 is "" and never a name asked for.
  auto off_of = [&](const std::string& n) -> std::uint32_t {
    auto it = name_off.find(n);
    return it == name_off.end() ? 0 : it->second;
  };
  struct MemberWanted {
    std::uint32_t struct_name, member_name;
    const std::pair<std::string, std::string>* query;
  };
  std::vector<MemberWanted> member_wants;
  for (const auto& sm : query.members)
    member_wants.push_back({off_of(sm.first), off_of(sm.second), &sm});
  std::vector<std::pair<std::uint32_t, const std::string*>> func_wants;
  for (const auto& f : query.funcs) func_wants.emplace_back(off_of(f), &f);

  // Pass 2: the type section, type ids counted from 1.
  BtfAnswer answer;
  Stream types(read, std::uint64_t{hdr_len} + type_off, type_len);
  std::uint32_t id = 0;
  unsigned char rec[kTypeSize];
  while (types.take(rec, sizeof rec)) {
    ++id;
    const std::uint32_t name = u32_at(rec);
    const std::uint32_t info = u32_at(rec + 4);
    const unsigned vlen = info & 0xffffU;
    const unsigned kind = (info >> 24) & 0x1fU;
    const bool kind_flag = (info >> 31) != 0;
    const long extra = trailing_bytes(kind, vlen);
    if (extra < 0)
      return bad(what, "type " + std::to_string(id) + " has unknown kind " + std::to_string(kind));
    if (kind == kFunc && name != 0) {
      for (const auto& [off, f] : func_wants) {
        if (off == name) answer.func_ids.emplace(*f, id);
      }
    }
    if ((kind == kStruct || kind == kUnion) && name != 0) {
      std::vector<const MemberWanted*> wanted;
      for (const auto& w : member_wants) {
        if (w.struct_name == name) wanted.push_back(&w);
      }
      if (!wanted.empty()) {
        answer.struct_sizes.emplace(wanted.front()->query->first, u32_at(rec + 8));
        for (unsigned i = 0; i < vlen; ++i) {
          unsigned char m[12];
          if (!types.take(m, sizeof m))
            return bad(what, "struct members run past the type section");
          const std::uint32_t m_name = u32_at(m);
          const std::uint32_t m_off = u32_at(m + 8);
          // With kind_flag the top 8 bits are a bitfield size: a bitfield
          // cannot be loaded as a whole member, so it is never an answer.
          const std::uint32_t bit_off = kind_flag ? (m_off & 0xffffffU) : m_off;
          const bool bitfield = kind_flag && (m_off >> 24) != 0;
          if (m_name == 0 || bitfield || bit_off % 8 != 0) continue;
          for (const auto* w : wanted) {
            if (w->member_name == m_name) {
              answer.member_offsets.emplace(w->query->first + "." + w->query->second, bit_off / 8);
            }
          }
        }
        continue;
      }
    }
    if (!types.skip(static_cast<std::uint64_t>(extra)))
      return bad(what, "type " + std::to_string(id) + " runs past the type section");
  }
  if (types.error() != 0) return sys::errno_error(types.error(), "read " + what);
  if (!types.done()) return bad(what, "a type record runs past the type section");
  return answer;
}

}  // namespace gpureap::proc
