#include "proc/bpf_pins.hpp"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <functional>
#include <utility>

#include "sys/dir.hpp"

namespace gpureap::proc {

namespace {

constexpr std::int64_t kPinUnusedSeconds = std::int64_t{24} * 3600;
constexpr std::size_t kPinEntries = 8;

long bpf(int cmd, bpf_attr& attr) {
  return ::syscall(SYS_bpf, cmd, &attr, sizeof attr);
}

// 0 where `path` is on a bpffs, else ENOTSUP, or statfs's errno (ENOENT: none yet).
int bpffs_at(const std::string& path) {
  struct statfs fs {};
  if (::statfs(path.c_str(), &fs) != 0) return errno;
  return static_cast<unsigned long>(fs.f_type) == BPF_FS_MAGIC ? 0 : ENOTSUP;
}

sys::UniqueFd object_at(const std::string& path) {
  bpf_attr attr{};
  attr.pathname = reinterpret_cast<std::uintptr_t>(path.c_str());
  return sys::UniqueFd(static_cast<int>(bpf(BPF_OBJ_GET, attr)));
}

int pin_at(int fd, const std::string& path) {
  bpf_attr attr{};
  attr.pathname = reinterpret_cast<std::uintptr_t>(path.c_str());
  attr.bpf_fd = static_cast<std::uint32_t>(fd);
  return bpf(BPF_OBJ_PIN, attr) == 0 ? 0 : errno;
}

template <class Info>
bool info_of(int fd, Info& info) {
  bpf_attr attr{};
  attr.info.bpf_fd = static_cast<std::uint32_t>(fd);
  attr.info.info_len = sizeof info;
  attr.info.info = reinterpret_cast<std::uintptr_t>(&info);
  return bpf(BPF_OBJ_GET_INFO_BY_FD, attr) == 0;
}

// Whether fd is a task iterator program named gpureap_scan, and data an
// array of one `data_size` value that the program itself uses (its .data):
// what this build pins, and nothing else the directory might hold under
// those names. A foreign map would take the switches the program never sees.
bool is_scan(int prog, int data, std::uint32_t data_size) {
  std::array<std::uint32_t, 16> map_ids{};  // the scan uses 4: .data, .rodata, args, .bss
  bpf_prog_info p{};
  p.nr_map_ids = map_ids.size();
  p.map_ids = reinterpret_cast<std::uintptr_t>(map_ids.data());
  bpf_map_info m{};
  if (!info_of(prog, p) || p.type != BPF_PROG_TYPE_TRACING ||
      std::strncmp(p.name, "gpureap_scan", sizeof p.name) != 0 || !info_of(data, m) ||
      m.type != BPF_MAP_TYPE_ARRAY || m.max_entries != 1 || m.value_size != data_size)
    return false;
  const auto used = std::min<std::size_t>(p.nr_map_ids, map_ids.size());
  return std::find(map_ids.begin(), map_ids.begin() + used, m.id) != map_ids.begin() + used;
}

sys::UniqueFd locked(const std::string& entry) {
  sys::UniqueFd fd(::open(entry.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (fd && ::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) return sys::UniqueFd();
  return fd;
}

// Entries nobody used for kPinUnusedSeconds (their mtime: set when taken),
// and the least recently used beyond kPinEntries, where no process holds
// them: several builds (gpureap, its exporter, an upgrade) share a directory.
void remove_stale_entries(const std::string& dir) {
  sys::UniqueFd dir_fd(::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!dir_fd) return;
  std::vector<std::pair<std::int64_t, std::string>> entries;  // (mtime, name)
  for (auto& name : sys::entry_names(dir_fd.get(), ".")) {
    struct stat st {};
    if (name.rfind("scan-", 0) == 0 &&
        ::fstatat(dir_fd.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0)
      entries.emplace_back(st.st_mtim.tv_sec, std::move(name));
  }
  std::sort(entries.begin(), entries.end(), std::greater<>());  // most recent first
  const std::int64_t now = ::time(nullptr);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    // Room for the one about to be pinned.
    if (i + 1 < kPinEntries && now - entries[i].first < kPinUnusedSeconds) continue;
    const std::string entry = dir + "/" + entries[i].second;
    if (auto held = locked(entry)) remove_entry(held.get(), entry);
  }
}

}  // namespace

void remove_entry(int entry_fd, const std::string& entry) {
  for (const auto& name : sys::entry_names(entry_fd, "."))
    (void)::unlinkat(entry_fd, name.c_str(), 0);
  (void)::rmdir(entry.c_str());
}

std::string own_build_id() {
  std::string id;
  // The first object dl_iterate_phdr reports is the executable itself.
  ::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* out) -> int {
        auto& hex = *static_cast<std::string*>(out);
        for (int i = 0; i < info->dlpi_phnum && hex.empty(); ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type != PT_NOTE) continue;
          // NOLINTNEXTLINE(performance-no-int-to-ptr): the loader gives addresses as integers
          const auto* at = reinterpret_cast<const unsigned char*>(info->dlpi_addr + ph.p_vaddr);
          const unsigned char* end = at + ph.p_memsz;
          while (at + sizeof(ElfW(Nhdr)) <= end) {
            ElfW(Nhdr) note{};
            std::memcpy(&note, at, sizeof note);
            const unsigned char* name = at + sizeof note;
            const unsigned char* desc = name + ((note.n_namesz + 3U) & ~3U);
            if (desc + note.n_descsz > end) break;
            if (note.n_type == NT_GNU_BUILD_ID && note.n_namesz == 4 &&
                std::memcmp(name, "GNU", 4) == 0) {
              static constexpr char kHex[] = "0123456789abcdef";
              for (std::size_t b = 0; b < note.n_descsz; ++b) {
                hex.push_back(kHex[desc[b] >> 4]);
                hex.push_back(kHex[desc[b] & 15]);
              }
              break;
            }
            at = desc + ((note.n_descsz + 3U) & ~3U);
          }
        }
        return 1;  // the executable only
      },
      &id);
  return id;
}

std::string pin_entry_name(std::string_view build_id, const std::vector<std::uint64_t>& key) {
  std::uint64_t hash = 0xcbf29ce484222325ULL;  // FNV-1a over the key's bytes
  for (std::uint64_t v : key) {
    for (int b = 0; b < 8; ++b) {
      hash ^= (v >> (8 * b)) & 0xff;
      hash *= 0x100000001b3ULL;
    }
  }
  char tail[17];
  (void)std::snprintf(tail, sizeof tail, "%016llx", static_cast<unsigned long long>(hash));
  return "scan-" + std::string(build_id) + "-" + tail;
}

sys::Result<PinnedScan> take_pinned_scan(const std::string& dir, const std::string& name,
                                         std::uint32_t data_size) {
  if (int err = bpffs_at(dir); err == ENOTSUP) {
    return sys::Error{ENOTSUP, dir + " is not on a bpffs"};
  } else if (err != 0) {  // NOLINT(readability-else-after-return): err is scoped to the if
    return sys::errno_error(err, "statfs " + dir);  // ENOENT: the first to pin creates it
  }
  PinnedScan pinned;
  pinned.entry = dir + "/" + name;
  pinned.lock = locked(pinned.entry);
  if (!pinned.lock) {
    if (errno == ENOENT) return sys::Error{ENOENT, "none pinned at " + pinned.entry};
    if (errno == EWOULDBLOCK)
      return sys::Error{EWOULDBLOCK, pinned.entry + " is in use by another scan"};
    return sys::errno_error(errno, "open " + pinned.entry);
  }
  for (const auto& file : sys::entry_names(pinned.lock.get(), ".")) {
    if (file.rfind("prog-", 0) == 0) {
      pinned.loader = file.substr(5);
      pinned.prog = object_at(pinned.entry + "/" + file);
    }
  }
  pinned.data = object_at(pinned.entry + "/data");
  if (!pinned.prog || !pinned.data || !is_scan(pinned.prog.get(), pinned.data.get(), data_size)) {
    // Half pinned (a process died pinning it), or not ours.
    remove_entry(pinned.lock.get(), pinned.entry);
    return sys::Error{ESTALE, pinned.entry + " held no scan program and .data map: removed"};
  }
  (void)::futimens(pinned.lock.get(), nullptr);  // used now: kept by remove_stale_entries
  return pinned;
}

sys::Result<PinnedScan> pin_scan(const std::string& dir, const std::string& name, int prog,
                                 int data, const std::string& loader) {
  // Created only inside a bpffs: never a stray directory elsewhere.
  int fs_err = bpffs_at(dir);
  if (fs_err == ENOENT) {
    const auto slash = dir.find_last_of('/');
    fs_err = bpffs_at(slash == std::string::npos ? "." : slash == 0 ? "/" : dir.substr(0, slash));
    if (fs_err == 0 && ::mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST)
      return sys::errno_error(errno, "mkdir " + dir);
  }
  if (fs_err == ENOTSUP) return sys::Error{ENOTSUP, dir + " is not on a bpffs"};
  if (fs_err != 0) return sys::errno_error(fs_err, "statfs " + dir);
  remove_stale_entries(dir);
  PinnedScan pinned;
  pinned.entry = dir + "/" + name;
  if (::mkdir(pinned.entry.c_str(), 0700) != 0)
    return sys::errno_error(errno, "mkdir " + pinned.entry);
  pinned.lock = locked(pinned.entry);
  if (!pinned.lock) return sys::errno_error(errno, "lock " + pinned.entry);
  if (int err = pin_at(prog, pinned.entry + "/prog-" + loader); err != 0) {
    remove_entry(pinned.lock.get(), pinned.entry);
    return sys::errno_error(err, "pin " + pinned.entry + "/prog-" + loader);
  }
  if (int err = pin_at(data, pinned.entry + "/data"); err != 0) {
    remove_entry(pinned.lock.get(), pinned.entry);
    return sys::errno_error(err, "pin " + pinned.entry + "/data");
  }
  pinned.prog = sys::UniqueFd(::fcntl(prog, F_DUPFD_CLOEXEC, 3));
  pinned.data = sys::UniqueFd(::fcntl(data, F_DUPFD_CLOEXEC, 3));
  pinned.loader = loader;
  return pinned;
}

}  // namespace gpureap::proc
