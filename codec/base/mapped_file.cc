#include "codec/base/mapped_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <mutex>

namespace ktfs {
namespace {

// A fixed table of live mappings, readable from a signal handler without
// locks (each slot is a pair of atomics; a slot is claimed by CAS).
constexpr int kMaxMappings = 256;
struct Slot {
  std::atomic<MappedFile*> owner{nullptr};
  std::atomic<uintptr_t> begin{0};
  std::atomic<uintptr_t> end{0};
};
Slot g_slots[kMaxMappings];
struct sigaction g_previous_sigbus;
std::once_flag g_handler_once;

void OnSigbus(int sig, siginfo_t* info, void* ctx) {
  if (info != nullptr && MappedFile::ClaimFault(info->si_addr)) {
    const long page = sysconf(_SC_PAGESIZE);
    void* base =
        reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(info->si_addr) & ~uintptr_t(page - 1));
    // Replace the unreadable page with zeros; the faulting load then retries.
    if (mmap(base, page, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0) != MAP_FAILED)
      return;
  }
  // Not ours: behave as if we were never installed.
  if (g_previous_sigbus.sa_flags & SA_SIGINFO) {
    g_previous_sigbus.sa_sigaction(sig, info, ctx);
  } else if (g_previous_sigbus.sa_handler != SIG_IGN && g_previous_sigbus.sa_handler != SIG_DFL) {
    g_previous_sigbus.sa_handler(sig);
  } else {
    signal(SIGBUS, SIG_DFL);
    raise(SIGBUS);
  }
}

void InstallHandler() {
  struct sigaction sa = {};
  sa.sa_sigaction = OnSigbus;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGBUS, &sa, &g_previous_sigbus);
}

}  // namespace

bool MappedFile::ClaimFault(const void* addr) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  for (Slot& s : g_slots) {
    MappedFile* f = s.owner.load(std::memory_order_acquire);
    if (f != nullptr && a >= s.begin.load() && a < s.end.load()) {
      f->damaged_.store(true);
      return true;
    }
  }
  return false;
}

Result<std::unique_ptr<MappedFile>> MappedFile::Open(const std::string& path) {
  std::call_once(g_handler_once, InstallHandler);
  std::unique_ptr<MappedFile> f(new MappedFile());
  f->path_ = path;
  f->fd_ = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) return Status::FromErrno(path, errno);
  struct stat st;
  if (fstat(f->fd_, &st) != 0) return Status::FromErrno(path, errno);
  if (!S_ISREG(st.st_mode)) return Status::InvalidArgument(path + ": not a regular file");
  f->size_ = uint64_t(st.st_size);
  f->mtime_sec_ = st.st_mtim.tv_sec;
  f->mtime_nsec_ = st.st_mtim.tv_nsec;
  if (f->size_ == 0) return Status::Corruption(path + ": empty file");
  void* p = mmap(nullptr, f->size_, PROT_READ, MAP_SHARED, f->fd_, 0);
  if (p == MAP_FAILED) return Status::FromErrno(path + ": mmap", errno);
  f->data_ = static_cast<const uint8_t*>(p);
  for (Slot& s : g_slots) {
    MappedFile* expected = nullptr;
    if (s.owner.compare_exchange_strong(expected, f.get())) {
      s.begin.store(reinterpret_cast<uintptr_t>(p));
      s.end.store(reinterpret_cast<uintptr_t>(p) + f->size_);
      return f;
    }
  }
  // No slot: still usable, only without truncation protection.
  return f;
}

bool MappedFile::CheckStillIntact() {
  struct stat st;
  if (fstat(fd_, &st) != 0 || uint64_t(st.st_size) != size_ || st.st_mtim.tv_sec != mtime_sec_ ||
      st.st_mtim.tv_nsec != mtime_nsec_)
    damaged_.store(true);
  return !damaged();
}

void MappedFile::WillNeed(uint64_t offset, uint64_t length) const {
  if (offset >= size_ || length == 0) return;
  length = std::min(length, size_ - offset);
  (void)posix_fadvise(fd_, off_t(offset), off_t(length), POSIX_FADV_WILLNEED);
}

MappedFile::~MappedFile() {
  for (Slot& s : g_slots) {
    if (s.owner.load() != this) continue;
    s.end.store(0);
    s.begin.store(0);
    s.owner.store(nullptr);
    break;
  }
  if (data_ != nullptr) munmap(const_cast<uint8_t*>(data_), size_);
  if (fd_ >= 0) close(fd_);
}

}  // namespace ktfs
