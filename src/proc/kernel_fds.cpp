#include "proc/kernel_fds.hpp"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>
#include <utility>

#include "proc/btf.hpp"
#include "sys/unique_fd.hpp"

namespace gpureap::proc {
namespace {

constexpr const char* kVmlinuxBtf = "/sys/kernel/btf/vmlinux";
constexpr ino_t kInitPidNamespaceInode = 0xEFFFFFFCU;  // include/linux/proc_ns.h

// What the program writes per descriptor; the stack layout below is this
// struct's, field by field. A record with pid 0 is the end marker, carrying
// the reader's own tgid as the kernel's initial PID namespace numbers it.
struct Record {
  std::uint32_t tgid;
  std::uint32_t pid;
  std::uint64_t start_ns;  // task->start_boottime
  std::uint32_t fd;
  std::uint32_t mode;  // inode->i_mode
  std::uint32_t rdev;  // inode->i_rdev, kernel encoding
  std::uint32_t dev;   // inode->i_sb->s_dev, kernel encoding
  std::uint64_t ino;   // inode->i_ino
};
static_assert(sizeof(Record) == 40);
constexpr short kRec = -static_cast<short>(sizeof(Record));  // record's stack offset from r10

short field(std::size_t offset_in_record) {
  return static_cast<short>(kRec + static_cast<short>(offset_in_record));
}

// A tiny assembler: instructions plus forward jumps patched by label.
class Program {
 public:
  void ldx(int size, int dst, int src, long off) {
    emit(BPF_LDX | BPF_MEM | size, dst, src, off16(off), 0);
  }
  void stx(int size, int dst, int src, short off) {
    emit(BPF_STX | BPF_MEM | size, dst, src, off, 0);
  }
  void st(int size, int dst, short off, int imm) {
    emit(BPF_ST | BPF_MEM | size, dst, 0, off, imm);
  }
  void mov(int dst, int src) { emit(BPF_ALU64 | BPF_MOV | BPF_X, dst, src, 0, 0); }
  void mov_imm(int dst, int imm) { emit(BPF_ALU64 | BPF_MOV | BPF_K, dst, 0, 0, imm); }
  void add_imm(int dst, int imm) { emit(BPF_ALU64 | BPF_ADD | BPF_K, dst, 0, 0, imm); }
  void rsh_imm(int dst, int imm) { emit(BPF_ALU64 | BPF_RSH | BPF_K, dst, 0, 0, imm); }
  void call(int helper) { emit(BPF_JMP | BPF_CALL, 0, 0, 0, helper); }
  void exit() { emit(BPF_JMP | BPF_EXIT, 0, 0, 0, 0); }
  // Conditional (op = BPF_JEQ/BPF_JNE against imm) or, with op 0, unconditional jump to a label.
  void jump(int op, int dst, int imm, int label) {
    fixups_.emplace_back(insns_.size(), label);
    emit(op == 0 ? (BPF_JMP | BPF_JA) : (BPF_JMP | op | BPF_K), dst, 0, 0, imm);
  }
  // Conditional jump comparing two registers (op = BPF_JNE, ...).
  void jump_reg(int op, int dst, int src, int label) {
    fixups_.emplace_back(insns_.size(), label);
    emit(BPF_JMP | op | BPF_X, dst, src, 0, 0);
  }
  void bind(int label) {
    if (labels_.size() <= static_cast<std::size_t>(label))
      labels_.resize(static_cast<std::size_t>(label) + 1, 0);
    labels_[static_cast<std::size_t>(label)] = insns_.size();
  }
  std::vector<bpf_insn> finish() {
    for (auto [at, label] : fixups_) {
      insns_[at].off = static_cast<short>(
          static_cast<long>(labels_[static_cast<std::size_t>(label)]) - static_cast<long>(at) - 1);
    }
    return insns_;
  }
  [[nodiscard]] bool fits() const { return fits_; }

 private:
  short off16(long off) {
    if (off < -32768 || off > 32767) fits_ = false;
    return static_cast<short>(off);
  }
  void emit(int code, int dst, int src, short off, int imm) {
    bpf_insn i{};
    i.code = static_cast<std::uint8_t>(code);
    i.dst_reg = static_cast<std::uint8_t>(dst & 0xf);
    i.src_reg = static_cast<std::uint8_t>(src & 0xf);
    i.off = off;
    i.imm = imm;
    insns_.push_back(i);
  }
  std::vector<bpf_insn> insns_;
  std::vector<std::pair<std::size_t, int>> fixups_;
  std::vector<std::size_t> labels_;
  bool fits_ = true;
};

struct Offsets {
  std::uint32_t task_tgid, task_pid, task_start, file_inode, inode_mode, inode_rdev, inode_ino,
      inode_sb, sb_dev;
  std::uint32_t iter_func_id;
  // The task program's (status: uid, NSpid); unset when this kernel's BTF lacks one.
  struct Task {
    std::uint32_t real_cred, cred_uid, thread_pid, pid_level, pid_numbers, upid_nr, upid_size;
    std::uint32_t iter_func_id;
    // What stat holds; unset when a member is missing (then stat is read).
    struct Stat {
      std::uint32_t real_parent, signal, signal_pids, comm, flags, state, exit_state;
    };
    std::optional<Stat> stat;
  };
  std::optional<Task> task;
};

sys::Result<Offsets> kernel_offsets() {
  BtfQuery q;
  q.members = {{"task_struct", "tgid"}, {"task_struct", "pid"}, {"task_struct", "start_boottime"},
               {"file", "f_inode"},     {"inode", "i_mode"},    {"inode", "i_rdev"},
               {"inode", "i_ino"},      {"inode", "i_sb"},      {"super_block", "s_dev"}};
  q.funcs = {"bpf_iter_task_file"};
  BtfQuery task_q;  // the task program's, optional
  task_q.members = {{"task_struct", "real_cred"},
                    {"cred", "uid"},
                    {"task_struct", "thread_pid"},
                    {"pid", "level"},
                    {"pid", "numbers"},
                    {"upid", "nr"}};
  task_q.funcs = {"bpf_iter_task"};
  BtfQuery stat_q;  // the task program's stat part, optional too
  stat_q.members = {{"task_struct", "real_parent"}, {"task_struct", "signal"},
                    {"signal_struct", "pids"},      {"task_struct", "comm"},
                    {"task_struct", "flags"},       {"task_struct", "exit_state"}};
  BtfQuery both = q;
  for (const BtfQuery* part : {&task_q, &stat_q}) {
    both.members.insert(both.members.end(), part->members.begin(), part->members.end());
    both.funcs.insert(both.funcs.end(), part->funcs.begin(), part->funcs.end());
  }
  // Renamed from `state` (a long) to `__state` (an int) in Linux 5.14; the low
  // 32 bits are the same on little-endian machines.
  both.members.push_back({"task_struct", "__state"});
  both.members.push_back({"task_struct", "state"});
  int fd = ::open(kVmlinuxBtf, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return sys::errno_error(errno, std::string("open ") + kVmlinuxBtf);
  sys::UniqueFd owned(fd);
  // Since Linux 6.16 the file can be mapped: the kernel's own pages, mapped
  // without faults and outside our RSS. Else pread, which sysfs serves one
  // page per call (1,350 calls for 5.5 MiB).
  struct stat st {};
  void* map = MAP_FAILED;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    map = ::mmap(nullptr, static_cast<std::size_t>(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
  }
  const auto map_size = static_cast<std::uint64_t>(st.st_size);
  auto answer = query_btf(
      [fd, map, map_size](std::uint64_t off, char* buf, std::size_t len) -> ssize_t {
        if (map != MAP_FAILED) {
          if (off >= map_size) return 0;
          const std::size_t n =
              static_cast<std::size_t>(std::min<std::uint64_t>(len, map_size - off));
          std::memcpy(buf, static_cast<const char*>(map) + off, n);
          return static_cast<ssize_t>(n);
        }
        for (;;) {
          ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(off));
          if (n >= 0 || errno != EINTR) return n;
        }
      },
      both, kVmlinuxBtf);
  if (map != MAP_FAILED) ::munmap(map, static_cast<std::size_t>(st.st_size));
  if (!answer) return answer.error();
  auto has_all = [&answer](const BtfQuery& part) {
    for (const auto& [strct, mem] : part.members) {
      std::string key = strct;
      key.append(".").append(mem);
      if (answer->member_offsets.count(key) == 0) return false;
    }
    for (const auto& f : part.funcs) {
      if (answer->func_ids.count(f) == 0) return false;
    }
    return true;
  };
  if (!has_all(q)) {
    std::string missing;
    for (const auto& [s, m] : q.members) {
      std::string key = s;
      key.append(".").append(m);
      if (answer->member_offsets.count(key) == 0) missing.append(" ").append(key);
    }
    for (const auto& f : q.funcs) {
      if (!answer->func_ids.count(f)) missing += " " + f;
    }
    return sys::Error{ENOENT, std::string(kVmlinuxBtf) + " lacks" + missing};
  }
  const auto& m = answer->member_offsets;
  std::optional<Offsets::Task> task;
  if (has_all(task_q) && answer->struct_sizes.count("upid") != 0) {
    task = Offsets::Task{m.at("task_struct.real_cred"),
                         m.at("cred.uid"),
                         m.at("task_struct.thread_pid"),
                         m.at("pid.level"),
                         m.at("pid.numbers"),
                         m.at("upid.nr"),
                         answer->struct_sizes.at("upid"),
                         answer->func_ids.at("bpf_iter_task"),
                         std::nullopt};
    const auto state = m.count("task_struct.__state") != 0 ? m.find("task_struct.__state")
                                                           : m.find("task_struct.state");
    if (has_all(stat_q) && state != m.end()) {
      task->stat = Offsets::Task::Stat{m.at("task_struct.real_parent"), m.at("task_struct.signal"),
                                       m.at("signal_struct.pids"),      m.at("task_struct.comm"),
                                       m.at("task_struct.flags"),       state->second,
                                       m.at("task_struct.exit_state")};
    }
  }
  return Offsets{m.at("task_struct.tgid"),
                 m.at("task_struct.pid"),
                 m.at("task_struct.start_boottime"),
                 m.at("file.f_inode"),
                 m.at("inode.i_mode"),
                 m.at("inode.i_rdev"),
                 m.at("inode.i_ino"),
                 m.at("inode.i_sb"),
                 m.at("super_block.s_dev"),
                 answer->func_ids.at("bpf_iter_task_file"),
                 task};
}

// bpf_iter__task_file is {meta, task, fd, file}, one u64 slot each: the
// iterator's context is its function's argument list, a stable ABI.
constexpr long kCtxMeta = 0, kCtxTask = 8, kCtxFd = 16, kCtxFile = 24;
constexpr long kMetaSeq = 0;  // bpf_iter_meta.seq

std::vector<bpf_insn> assemble(const Offsets& o, bool& fits) {
  enum { kFile, kNoInode, kWrite, kExit };
  Program p;
  p.mov(6, 1);                    // r6 = ctx
  p.ldx(BPF_DW, 8, 6, kCtxFile);  // r8 = ctx->file
  p.jump(BPF_JNE, 8, 0, kFile);
  // No file: the end of the iteration. Write the marker with our own tgid.
  p.call(BPF_FUNC_get_current_pid_tgid);
  p.rsh_imm(0, 32);
  p.stx(BPF_W, 10, 0, field(offsetof(Record, tgid)));
  p.st(BPF_W, 10, field(offsetof(Record, pid)), 0);
  p.st(BPF_DW, 10, field(offsetof(Record, start_ns)), 0);
  p.st(BPF_W, 10, field(offsetof(Record, fd)), -1);
  p.st(BPF_W, 10, field(offsetof(Record, mode)), 0);
  p.st(BPF_W, 10, field(offsetof(Record, rdev)), 0);
  p.st(BPF_W, 10, field(offsetof(Record, dev)), 0);
  p.st(BPF_DW, 10, field(offsetof(Record, ino)), 0);
  p.jump(0, 0, 0, kWrite);

  p.bind(kFile);
  p.ldx(BPF_DW, 7, 6, kCtxTask);  // r7 = ctx->task
  p.jump(BPF_JEQ, 7, 0, kExit);
  p.ldx(BPF_W, 2, 7, o.task_tgid);
  p.stx(BPF_W, 10, 2, field(offsetof(Record, tgid)));
  p.ldx(BPF_W, 2, 7, o.task_pid);
  p.stx(BPF_W, 10, 2, field(offsetof(Record, pid)));
  p.ldx(BPF_DW, 2, 7, o.task_start);
  p.stx(BPF_DW, 10, 2, field(offsetof(Record, start_ns)));
  p.ldx(BPF_W, 2, 6, kCtxFd);
  p.stx(BPF_W, 10, 2, field(offsetof(Record, fd)));
  p.st(BPF_W, 10, field(offsetof(Record, mode)), 0);
  p.st(BPF_W, 10, field(offsetof(Record, rdev)), 0);
  p.st(BPF_W, 10, field(offsetof(Record, dev)), 0);
  p.st(BPF_DW, 10, field(offsetof(Record, ino)), 0);
  p.ldx(BPF_DW, 3, 8, o.file_inode);  // r3 = file->f_inode
  p.jump(BPF_JEQ, 3, 0, kWrite);
  p.ldx(BPF_H, 2, 3, o.inode_mode);
  p.stx(BPF_W, 10, 2, field(offsetof(Record, mode)));
  p.ldx(BPF_W, 2, 3, o.inode_rdev);
  p.stx(BPF_W, 10, 2, field(offsetof(Record, rdev)));
  p.ldx(BPF_DW, 2, 3, o.inode_ino);
  p.stx(BPF_DW, 10, 2, field(offsetof(Record, ino)));
  p.ldx(BPF_DW, 4, 3, o.inode_sb);  // r4 = inode->i_sb
  p.jump(BPF_JEQ, 4, 0, kWrite);
  p.ldx(BPF_W, 2, 4, o.sb_dev);
  p.stx(BPF_W, 10, 2, field(offsetof(Record, dev)));

  p.bind(kWrite);  // bpf_seq_write(ctx->meta->seq, &rec, sizeof rec)
  p.ldx(BPF_DW, 1, 6, kCtxMeta);
  p.ldx(BPF_DW, 1, 1, kMetaSeq);
  p.mov(2, 10);
  p.add_imm(2, kRec);
  p.mov_imm(3, static_cast<int>(sizeof(Record)));
  p.call(BPF_FUNC_seq_write);
  p.bind(kExit);
  p.mov_imm(0, 0);
  p.exit();
  fits = p.fits();
  return p.finish();
}

// What the task program writes per thread-group leader: what /proc/PID/status
// would give the scan (real uid, NSpid), with the start time to check that the
// pid read under /proc is the same process.
constexpr unsigned kMaxNsLevels = 8;  // deeper nesting: status is read instead
struct TaskRecord {
  std::uint32_t tgid;
  std::uint32_t uid;       // real_cred->uid; all-ones when unreadable
  std::uint64_t start_ns;  // start_boottime
  std::uint32_t level;     // thread_pid->level; all-ones when unreadable
  std::uint32_t nspid[kMaxNsLevels];
  std::uint32_t stat_ok;  // 1 when every field below was read
  std::uint32_t ppid;     // real_parent->tgid
  std::uint32_t pgrp;     // signal->pids[PIDTYPE_PGID]->numbers[0].nr
  std::uint32_t session;  // signal->pids[PIDTYPE_SID]->numbers[0].nr
  std::uint32_t flags;    // PF_*
  std::uint32_t state;    // __state
  std::uint32_t exit_state;
  char comm[16];
};
static_assert(sizeof(TaskRecord) == 96);
constexpr short kTaskRec = -static_cast<short>(sizeof(TaskRecord));
constexpr short kTaskScratch = kTaskRec - 8;  // one pointer read on the way
// enum pid_type since Linux 4.19 (PIDTYPE_TGID added); iterators need 5.8+.
constexpr std::uint32_t kPidTypePgid = 2;
constexpr std::uint32_t kPidTypeSid = 3;

short task_field(std::size_t offset_in_record) {
  return static_cast<short>(kTaskRec + static_cast<short>(offset_in_record));
}

// The task program reads through bpf_probe_read_kernel: values land on the
// stack as scalars, so the verifier has no BTF pointer to judge. (On 6.x each
// pointer loaded from a trusted pointer costs the verifier a linear search of
// vmlinux BTF, ~1 ms; per task a helper call is cheap.) These use r0-r5 only:
// r6 (ctx), r7 (task), r8, r9 survive.

// `size` bytes at the address in r3 to the stack at `dst`; to `fail` on error.
void probe_read_r3(Program& p, short dst, int size, int fail) {
  p.mov(1, 10);
  p.add_imm(1, dst);
  p.mov_imm(2, size);
  p.call(BPF_FUNC_probe_read_kernel);
  p.jump(BPF_JNE, 0, 0, fail);
}

void probe_read_at(Program& p, int base, std::uint32_t offset, short dst, int size, int fail) {
  p.mov(3, base);
  p.add_imm(3, static_cast<int>(offset));
  probe_read_r3(p, dst, size, fail);
}

// reg = the pointer in the scratch slot; to `fail` when it is NULL.
void scratch_pointer(Program& p, int reg, int fail) {
  p.ldx(BPF_DW, reg, 10, kTaskScratch);
  p.jump(BPF_JEQ, reg, 0, fail);
}

// The stat part: any failed read leaves stat_ok 0, and the scan reads
// /proc/PID/stat instead.
void assemble_task_stat(Program& p, const Offsets& o, const Offsets::Task& t,
                        const Offsets::Task::Stat& st, int done) {
  auto rec = [](std::size_t offset) { return task_field(offset); };
  probe_read_at(p, 7, st.flags, rec(offsetof(TaskRecord, flags)), 4, done);
  probe_read_at(p, 7, st.state, rec(offsetof(TaskRecord, state)), 4, done);
  probe_read_at(p, 7, st.exit_state, rec(offsetof(TaskRecord, exit_state)), 4, done);
  probe_read_at(p, 7, st.comm, rec(offsetof(TaskRecord, comm)), 16, done);
  probe_read_at(p, 7, st.real_parent, kTaskScratch, 8, done);
  scratch_pointer(p, 3, done);
  p.add_imm(3, static_cast<int>(o.task_tgid));
  probe_read_r3(p, rec(offsetof(TaskRecord, ppid)), 4, done);
  // Group and session: the struct pid of each in signal->pids[], then its
  // number at level 0 (this reader is in the initial PID namespace).
  for (auto [type, field] : {std::pair{kPidTypePgid, offsetof(TaskRecord, pgrp)},
                             std::pair{kPidTypeSid, offsetof(TaskRecord, session)}}) {
    probe_read_at(p, 7, st.signal, kTaskScratch, 8, done);
    scratch_pointer(p, 3, done);
    p.add_imm(3, static_cast<int>(st.signal_pids + 8 * type));
    probe_read_r3(p, kTaskScratch, 8, done);
    scratch_pointer(p, 3, done);
    p.add_imm(3, static_cast<int>(t.pid_numbers + t.upid_nr));
    probe_read_r3(p, rec(field), 4, done);
  }
  p.st(BPF_W, 10, rec(offsetof(TaskRecord, stat_ok)), 1);
}

std::vector<bpf_insn> assemble_task(const Offsets& o, const Offsets::Task& t, bool& fits) {
  enum { kPid, kWrite, kExit, kStatDone };
  Program p;
  p.mov(6, 1);                    // r6 = ctx (bpf_iter__task: {meta, task})
  p.ldx(BPF_DW, 7, 6, kCtxTask);  // r7 = ctx->task
  p.jump(BPF_JEQ, 7, 0, kExit);
  p.ldx(BPF_W, 2, 7, o.task_tgid);
  p.ldx(BPF_W, 3, 7, o.task_pid);
  p.jump_reg(BPF_JNE, 2, 3, kExit);  // threads: their leader speaks for the process
  p.stx(BPF_W, 10, 2, task_field(offsetof(TaskRecord, tgid)));
  p.st(BPF_W, 10, task_field(offsetof(TaskRecord, uid)), -1);
  p.st(BPF_W, 10, task_field(offsetof(TaskRecord, level)), -1);
  for (unsigned i = 0; i < kMaxNsLevels; ++i) {
    p.st(BPF_W, 10, task_field(offsetof(TaskRecord, nspid) + sizeof(std::uint32_t) * i), 0);
  }
  // The stat part starts zeroed: a failed read leaves it so (and stat_ok 0).
  for (std::size_t off = offsetof(TaskRecord, stat_ok); off < sizeof(TaskRecord); off += 4) {
    p.st(BPF_W, 10, task_field(off), 0);
  }
  p.ldx(BPF_DW, 2, 7, o.task_start);
  p.stx(BPF_DW, 10, 2, task_field(offsetof(TaskRecord, start_ns)));
  probe_read_at(p, 7, t.real_cred, kTaskScratch, 8, kPid);  // task->real_cred
  scratch_pointer(p, 3, kPid);
  p.add_imm(3, static_cast<int>(t.cred_uid));
  probe_read_r3(p, kTaskScratch, 4, kPid);  // not into uid: a failed read zeroes (root)
  p.ldx(BPF_W, 2, 10, kTaskScratch);
  p.stx(BPF_W, 10, 2, task_field(offsetof(TaskRecord, uid)));
  p.bind(kPid);
  if (t.stat) assemble_task_stat(p, o, t, *t.stat, kStatDone);
  p.bind(kStatDone);
  probe_read_at(p, 7, t.thread_pid, kTaskScratch, 8, kWrite);
  scratch_pointer(p, 8, kWrite);  // r8 = task->thread_pid
  p.mov(3, 8);
  p.add_imm(3, static_cast<int>(t.pid_level));
  probe_read_r3(p, kTaskScratch, 4, kWrite);
  p.ldx(BPF_W, 9, 10, kTaskScratch);  // r9 = level
  p.stx(BPF_W, 10, 9, task_field(offsetof(TaskRecord, level)));
  // numbers[] is a flexible array (numbers[1] before 5.x): read each level
  // with bpf_probe_read_kernel rather than a load the verifier may refuse.
  for (unsigned i = 0; i < kMaxNsLevels; ++i) {
    if (i > 0) p.jump(BPF_JLT, 9, static_cast<int>(i), kWrite);  // level < i: done
    p.mov(1, 10);
    p.add_imm(1, task_field(offsetof(TaskRecord, nspid) + sizeof(std::uint32_t) * i));
    p.mov_imm(2, 4);
    p.mov(3, 8);
    p.add_imm(3, static_cast<int>(t.pid_numbers + i * t.upid_size + t.upid_nr));
    p.call(BPF_FUNC_probe_read_kernel);
  }
  p.bind(kWrite);  // bpf_seq_write(ctx->meta->seq, &rec, sizeof rec)
  p.ldx(BPF_DW, 1, 6, kCtxMeta);
  p.ldx(BPF_DW, 1, 1, kMetaSeq);
  p.mov(2, 10);
  p.add_imm(2, kTaskRec);
  p.mov_imm(3, static_cast<int>(sizeof(TaskRecord)));
  p.call(BPF_FUNC_seq_write);
  p.bind(kExit);
  p.mov_imm(0, 0);
  p.exit();
  fits = p.fits();
  return p.finish();
}

long bpf(int cmd, bpf_attr& attr) {
  return ::syscall(SYS_bpf, cmd, &attr, sizeof attr);
}

template <class T>
std::uint64_t ptr(const T* p) {
  return static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(p));
}

sys::Result<sys::UniqueFd> load(const std::vector<bpf_insn>& insns, std::uint32_t func_id,
                                const std::string& what) {
  // bpf_seq_write is GPL-only: the program (assembled here, run in the
  // kernel) declares a GPL-compatible licence as every iterator must.
  static constexpr char kLicense[] = "GPL";
  auto attempt = [&](char* log, std::uint32_t log_size) {
    bpf_attr attr{};
    attr.prog_type = BPF_PROG_TYPE_TRACING;
    attr.expected_attach_type = BPF_TRACE_ITER;
    attr.insn_cnt = static_cast<std::uint32_t>(insns.size());
    attr.insns = ptr(insns.data());
    attr.license = ptr(kLicense);
    attr.attach_btf_id = func_id;
    if (log != nullptr) {
      attr.log_level = 1;
      attr.log_buf = ptr(log);
      attr.log_size = log_size;
    }
    return bpf(BPF_PROG_LOAD, attr);
  };
  long fd = attempt(nullptr, 0);
  if (fd >= 0) return sys::UniqueFd(static_cast<int>(fd));
  const int err = errno;
  if (err == EPERM || err == EACCES || err == ENOSYS)
    return sys::errno_error(err, "load the " + what);
  // Only on failure: load again with the verifier's log, for the message.
  std::vector<char> log(16384);
  (void)attempt(log.data(), static_cast<std::uint32_t>(log.size()));
  std::string_view text(log.data(), ::strnlen(log.data(), log.size()));
  if (text.size() > 400) text = text.substr(text.size() - 400);
  return sys::errno_error(err, "load the " + what + ": " + std::string(text));
}

// Loads, attaches and reads one iterator program: fn(bytes) once per record
// of `size` bytes, in the order the kernel wrote them.
template <class Fn>
sys::Status run_iterator(const std::vector<bpf_insn>& insns, std::uint32_t func_id,
                         std::size_t size, const std::string& what, Fn&& fn) {
  auto prog = load(insns, func_id, what);
  if (!prog) return prog.error();
  bpf_attr link_attr{};
  link_attr.link_create.prog_fd = static_cast<std::uint32_t>(prog->get());
  link_attr.link_create.attach_type = BPF_TRACE_ITER;
  long link = bpf(BPF_LINK_CREATE, link_attr);
  if (link < 0) return sys::errno_error(errno, "attach the " + what);
  sys::UniqueFd link_fd(static_cast<int>(link));
  bpf_attr iter_attr{};
  iter_attr.iter_create.link_fd = static_cast<std::uint32_t>(link_fd.get());
  long iter = bpf(BPF_ITER_CREATE, iter_attr);
  if (iter < 0) return sys::errno_error(errno, "start the " + what);
  sys::UniqueFd iter_fd(static_cast<int>(iter));
  std::vector<char> buf(65536);
  std::size_t carry = 0;  // bytes of a record cut by the previous read
  for (;;) {
    ssize_t n = ::read(iter_fd.get(), buf.data() + carry, buf.size() - carry);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return sys::errno_error(errno, "read the " + what);
    if (n == 0) break;
    const std::size_t have = carry + static_cast<std::size_t>(n);
    std::size_t at = 0;
    for (; at + size <= have; at += size) fn(buf.data() + at);
    carry = have - at;
    std::memmove(buf.data(), buf.data() + at, carry);
  }
  if (carry != 0) return sys::Error{EBADMSG, what + ": a cut record at the end"};
  return sys::Ok{};
}

std::uint64_t boottime_ticks(std::uint64_t ns_per_tick) {
  timespec ts{};
  ::clock_gettime(CLOCK_BOOTTIME, &ts);
  return (static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ULL +
          static_cast<std::uint64_t>(ts.tv_nsec)) /
         ns_per_tick;
}

// Per-process accumulation, flushed when the records move to another task.
class Aggregator {
 public:
  Aggregator(const DeviceMatcher& devices, std::uint64_t ns_per_tick)
      : devices_(devices), ns_per_tick_(ns_per_tick), node_counts_(devices.nodes.size(), 0) {}

  void add(const Record& r) {
    const auto tgid = static_cast<pid_t>(r.tgid);
    if (!open_ || current_.tgid != tgid) {
      flush();
      current_ = KernelFdSummary{};
      current_.tgid = tgid;
      open_ = true;
    }
    if (r.pid == r.tgid) current_.start_ticks = r.start_ns / ns_per_tick_;
    ++current_.fd_count;
    KernelFdRecord k{r.mode, user_dev_from_kernel(r.rdev), user_dev_from_kernel(r.dev), r.ino};
    auto m = match_kernel_fd(devices_, k);
    if (m.node >= 0) {
      ++node_counts_[static_cast<std::size_t>(m.node)];
    } else if (m.rdev) {
      auto it = std::find_if(by_major_.begin(), by_major_.end(),
                             [&](const auto& e) { return e.first == *m.rdev; });
      if (it == by_major_.end()) {
        by_major_.emplace_back(*m.rdev, 1);
      } else {
        ++it->second;
      }
    }
  }

  std::vector<KernelFdSummary> finish() {
    flush();
    // Threads with their own descriptor table come in tid order, apart from
    // their leader: merge them into one entry per process.
    std::stable_sort(out_.begin(), out_.end(),
                     [](const auto& a, const auto& b) { return a.tgid < b.tgid; });
    std::vector<KernelFdSummary> merged;
    merged.reserve(out_.size());
    for (auto& s : out_) {
      if (merged.empty() || merged.back().tgid != s.tgid) {
        merged.push_back(std::move(s));
        continue;
      }
      auto& into = merged.back();
      into.fd_count += s.fd_count;
      if (into.start_ticks == 0) into.start_ticks = s.start_ticks;
      for (auto& use : s.gpu_fds) {
        auto it = std::find_if(into.gpu_fds.begin(), into.gpu_fds.end(),
                               [&](const auto& u) { return u.device == use.device; });
        if (it == into.gpu_fds.end()) {
          into.gpu_fds.push_back(std::move(use));
        } else {
          it->count += use.count;
        }
      }
    }
    return merged;
  }

 private:
  void flush() {
    if (!open_) return;
    for (std::size_t i = 0; i < node_counts_.size(); ++i) {
      if (node_counts_[i] > 0)
        current_.gpu_fds.push_back(DeviceUse{devices_.nodes[i].name, node_counts_[i]});
      node_counts_[i] = 0;
    }
    std::sort(by_major_.begin(), by_major_.end());
    for (const auto& [rdev, c] : by_major_) {
      current_.gpu_fds.push_back(DeviceUse{
          "nvidia-" + std::to_string(::major(rdev)) + ":" + std::to_string(::minor(rdev)), c});
    }
    by_major_.clear();
    out_.push_back(std::move(current_));
    open_ = false;
  }

  const DeviceMatcher& devices_;
  std::uint64_t ns_per_tick_;
  std::vector<unsigned> node_counts_;
  std::vector<std::pair<dev_t, unsigned>> by_major_;
  KernelFdSummary current_;
  bool open_ = false;
  std::vector<KernelFdSummary> out_;
};

// The char devices every process has and no GPU ever is, by number: what the
// /proc walk skips by path (/dev/null, random, urandom, tty*, console, ptmx, pts).
bool never_a_gpu(dev_t rdev) {
  const unsigned maj = ::major(rdev);
  const unsigned min = ::minor(rdev);
  if (maj == 1) return min == 3 || min == 8 || min == 9;
  if (maj == 5) return min <= 2;
  return maj == 4 || (maj >= 136 && maj <= 143);
}

// The pid the host root's /proc gives us: equal to the kernel's global tgid
// only when that procfs belongs to the initial PID namespace.
std::optional<pid_t> procfs_self(const sys::HostRoot& root) {
  char buf[32];
  ssize_t n = ::readlinkat(root.dir_fd(), "proc/self", buf, sizeof buf);
  if (n <= 0 || static_cast<std::size_t>(n) >= sizeof buf) return std::nullopt;
  pid_t v = 0;
  auto [end, ec] = std::from_chars(buf, buf + n, v);
  if (ec != std::errc{} || end != buf + n) return std::nullopt;
  return v;
}

// The task program, best effort: without it the scan reads /proc/PID/status.
void read_kernel_tasks(const Offsets& o, std::uint64_t ns_per_tick, KernelFdTable& table) {
  if (!o.task) {
    table.tasks_note = std::string(kVmlinuxBtf) + " lacks a member the task iterator reads";
    return;
  }
  bool fits = true;
  const auto insns = assemble_task(o, *o.task, fits);
  if (!fits) {
    table.tasks_note = "a member offset of the task iterator exceeds 16 bits";
    return;
  }
  auto ran = run_iterator(insns, o.task->iter_func_id, sizeof(TaskRecord), "BPF task iterator",
                          [&](const char* bytes) {
                            TaskRecord r{};
                            std::memcpy(&r, bytes, sizeof r);
                            // Unreadable (a failed read leaves a 0, never a
                            // pid) or nested deeper than recorded: status answers.
                            if (r.uid == ~0U || r.level >= kMaxNsLevels) return;
                            for (unsigned i = 0; i <= r.level; ++i) {
                              if (r.nspid[i] == 0) return;
                            }
                            KernelTask t;
                            t.tgid = static_cast<pid_t>(r.tgid);
                            t.uid = static_cast<uid_t>(r.uid);
                            t.start_ticks = r.start_ns / ns_per_tick;
                            t.levels = static_cast<std::uint8_t>(r.level + 1);
                            for (unsigned i = 0; i < t.levels; ++i)
                              t.nspid[i] = static_cast<pid_t>(r.nspid[i]);
                            if (r.stat_ok == 1 && r.comm[0] != '\0') {
                              StatInfo st;
                              st.pid = t.tgid;
                              st.comm.assign(r.comm, strnlen(r.comm, sizeof r.comm));
                              st.state = task_state_letter(r.state, r.exit_state);
                              st.ppid = static_cast<pid_t>(r.ppid);
                              st.pgrp = static_cast<pid_t>(r.pgrp);
                              st.session = static_cast<pid_t>(r.session);
                              st.flags = r.flags;
                              st.start_time = t.start_ticks;
                              // Not for kernel threads: stat shows a worker's
                              // or kthread's full name, longer than comm.
                              if (!st.kernel_thread()) t.stat = std::move(st);
                            }
                            table.tasks.push_back(std::move(t));
                          });
  if (!ran) {
    table.tasks.clear();
    table.tasks_note = ran.error().message;
    return;
  }
  std::sort(table.tasks.begin(), table.tasks.end(),
            [](const KernelTask& a, const KernelTask& b) { return a.tgid < b.tgid; });
}

}  // namespace

char task_state_letter(std::uint32_t state, std::uint32_t exit_state) {
  // include/linux/sched.h: TASK_REPORT is the low seven bits; TASK_IDLE is
  // TASK_UNINTERRUPTIBLE | TASK_NOLOAD; rtlock waiters and frozen tasks
  // (TASK_RTLOCK_WAIT, TASK_FROZEN) are reported as uninterruptible.
  constexpr std::uint32_t kReport = 0x7f, kIdle = 0x402, kRtlockWait = 0x1000, kFrozen = 0x8000;
  if ((state & kIdle) == kIdle) return 'I';
  std::uint32_t s = (state | exit_state) & kReport;
  if ((state & (kRtlockWait | kFrozen)) != 0) s = 2;
  constexpr char kLetters[] = "RSDTtXZP";
  const int index = s == 0 ? 0 : 32 - __builtin_clz(s);  // fls()
  return kLetters[index];
}

const KernelFdSummary* KernelFdTable::find(pid_t tgid) const {
  auto it = std::lower_bound(processes.begin(), processes.end(), tgid,
                             [](const KernelFdSummary& s, pid_t v) { return s.tgid < v; });
  return it != processes.end() && it->tgid == tgid ? &*it : nullptr;
}

const KernelTask* KernelFdTable::find_task(pid_t tgid) const {
  auto it = std::lower_bound(tasks.begin(), tasks.end(), tgid,
                             [](const KernelTask& t, pid_t v) { return t.tgid < v; });
  return it != tasks.end() && it->tgid == tgid ? &*it : nullptr;
}

KernelFdSummary* KernelFdTable::find(pid_t tgid) {
  return const_cast<KernelFdSummary*>(std::as_const(*this).find(tgid));
}

dev_t user_dev_from_kernel(std::uint32_t kernel_dev) {
  return ::makedev(kernel_dev >> 20, kernel_dev & 0xfffffU);
}

KernelFdMatch match_kernel_fd(const DeviceMatcher& devices, const KernelFdRecord& record) {
  KernelFdMatch m;
  if (S_ISCHR(record.mode)) {
    if (never_a_gpu(record.rdev)) return m;
    for (std::size_t i = 0; i < devices.nodes.size(); ++i) {
      if (devices.nodes[i].rdev && *devices.nodes[i].rdev == record.rdev) {
        m.node = static_cast<int>(i);
        return m;
      }
    }
    if (std::find(devices.majors.begin(), devices.majors.end(), ::major(record.rdev)) !=
        devices.majors.end()) {
      m.rdev = record.rdev;
    }
  } else if (S_ISREG(record.mode)) {
    for (std::size_t i = 0; i < devices.nodes.size(); ++i) {
      const auto& f = devices.nodes[i].file;
      if (f && f->dev == record.dev && f->ino == record.ino) {
        m.node = static_cast<int>(i);
        return m;
      }
    }
  }
  return m;
}

std::string kernel_match_gap(const DeviceMatcher& devices) {
  for (const auto& n : devices.nodes) {
    if (!n.rdev && !n.file)
      return "device " + n.name + " (" + n.path + ") is known only by its path";
  }
  return {};
}

sys::Result<KernelFdTable> read_kernel_fds(const sys::HostRoot& root,
                                           const DeviceMatcher& devices) {
  if (auto gap = kernel_match_gap(devices); !gap.empty()) return sys::Error{EINVAL, gap};
  // The iterator walks the reader's own PID namespace: only from the initial
  // one does it see the node (a container's prestop or observe never does).
  // Its inode number is fixed (PROC_PID_INIT_INO), so this costs no BTF read.
  struct stat ns {};
  if (::stat("/proc/self/ns/pid", &ns) != 0)
    return sys::errno_error(errno, "stat /proc/self/ns/pid");
  if (ns.st_ino != kInitPidNamespaceInode) {
    return sys::Error{
        EXDEV, "not in the initial PID namespace: the kernel iterator would see only this one"};
  }
  const auto self = procfs_self(root);
  if (!self) return sys::Error{ENOENT, "cannot read " + root.join("proc/self")};
  const long hz = ::sysconf(_SC_CLK_TCK);
  if (hz <= 0 || 1000000000L % hz != 0)
    return sys::Error{EINVAL, "clock ticks per second: " + std::to_string(hz)};
  const auto ns_per_tick = static_cast<std::uint64_t>(1000000000L / hz);

  auto offsets = kernel_offsets();
  if (!offsets) return offsets.error();
  bool fits = true;
  const auto insns = assemble(*offsets, fits);
  if (!fits)
    return sys::Error{ERANGE,
                      std::string("a member offset in ") + kVmlinuxBtf + " exceeds 16 bits"};
  KernelFdTable table;
  table.started_ticks = boottime_ticks(ns_per_tick);
  Aggregator agg(devices, ns_per_tick);
  std::optional<pid_t> reader;
  auto ran = run_iterator(insns, offsets->iter_func_id, sizeof(Record), "BPF descriptor iterator",
                          [&](const char* bytes) {
                            Record r{};
                            std::memcpy(&r, bytes, sizeof r);
                            if (r.pid == 0) {
                              reader = static_cast<pid_t>(r.tgid);
                            } else {
                              agg.add(r);
                            }
                          });
  if (!ran) return ran.error();
  if (!reader) return sys::Error{EBADMSG, "BPF descriptor iterator: no end marker"};
  if (*reader != *self) {
    return sys::Error{EXDEV, root.join("proc") + " is not the initial PID namespace's (self is " +
                                 std::to_string(*self) + ", the kernel's " +
                                 std::to_string(*reader) + ")"};
  }
  table.processes = agg.finish();
  read_kernel_tasks(*offsets, ns_per_tick, table);
  return table;
}

}  // namespace gpureap::proc
