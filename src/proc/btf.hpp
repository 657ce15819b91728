// A streaming reader of the kernel's BTF (/sys/kernel/btf/vmlinux): the byte
// offsets of a few struct members and the type ids of a few functions, which
// is all the descriptor iterator (kernel_fds) needs to be assembled for the
// running kernel. It reads in 64 KiB chunks and keeps only the names asked
// for: libbpf would hold the whole 5+ MiB blob, more than a scan's budget.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "sys/error.hpp"

namespace gpureap::proc {

struct BtfQuery {
  std::vector<std::pair<std::string, std::string>> members;  // {struct name, member name}
  std::vector<std::string> funcs;                            // FUNC names
};

struct BtfAnswer {
  // "struct.member" → byte offset; only byte-aligned, non-bitfield members.
  std::map<std::string, std::uint32_t> member_offsets;
  std::map<std::string, std::uint32_t> func_ids;  // name → BTF type id
  // Byte size of every struct (or union) that had a member asked for.
  std::map<std::string, std::uint32_t> struct_sizes;

  [[nodiscard]] bool complete(const BtfQuery& q) const {
    return member_offsets.size() == q.members.size() && func_ids.size() == q.funcs.size();
  }
};

// Reads up to `len` bytes at `offset` into `buf`; returns the count (0 at the
// end) or -1 with errno set.
using ReadAt = std::function<ssize_t(std::uint64_t offset, char* buf, std::size_t len)>;

// Pure over `read`: the same bytes always give the same answer. Fails (EBADMSG,
// naming `what`) on a bad magic, header or a record running past its section;
// names that are not found are simply absent from the answer.
sys::Result<BtfAnswer> query_btf(const ReadAt& read, const BtfQuery& query,
                                 const std::string& what);

}  // namespace gpureap::proc
