// Which GPU descriptors of different processes refer to one open file
// description (inherited over fork, or passed over a socket): what tells the
// processes sharing a GPU context. The kernel iterator gives it directly (its
// file objects); for processes the /proc walk read, kcmp(KCMP_FILE) answers.
// kcmp orders two descriptors' file objects by an obfuscated address, so one
// sort of every GPU descriptor groups the equal ones.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "proc/process.hpp"
#include "sys/error.hpp"
#include "sys/host_root.hpp"

namespace gpureap::proc {

// Ids for n items from a three-way comparison of a total order (<0, 0, >0):
// equal items get the same id, counting from 1. A bottom-up merge sort: n log n
// comparisons, and a comparison that contradicts itself (a descriptor closed
// meanwhile) gives wrong ids at worst, never undefined behaviour. Pure.
std::vector<std::uint64_t> ids_by_order(
    std::size_t n, const std::function<int(std::size_t, std::size_t)>& compare);

// Replaces Process::gpu_files of every process given by kcmp's numbering of its
// gpu_fd_numbers, so every value is comparable across them. A descriptor kcmp
// cannot see (closed since, process gone) leaves its process's gpu_files empty:
// unknown. Fails, changing nothing, when the host root's /proc is not this
// process's PID namespace (kcmp takes our pids), when kcmp is unavailable
// (ENOSYS without CONFIG_KCMP, EPERM without ptrace access), or when there are
// more than `max_descriptors` (n log n system calls).
sys::Status identify_files_by_kcmp(const sys::HostRoot& root,
                                   const std::vector<Process*>& processes,
                                   std::size_t max_descriptors = 4096);

}  // namespace gpureap::proc
