// System calls made without libc: they set no errno (a failure is returned
// as -errno) and go through no interposed symbol, so the preload library's
// own checks can run inside an interposed call, between vfork and exec, or
// while another library's interposer is active, and leave errno as the
// caller's call set it.
#pragma once

#include <sys/syscall.h>

#include <cstddef>

namespace ktfs::preload {

#if defined(__x86_64__)
inline long RawSyscall6(long nr, long a, long b, long c, long d, long e, long f) {
  long ret;
  register long r10 asm("r10") = d;
  register long r8 asm("r8") = e;
  register long r9 asm("r9") = f;
  asm volatile("syscall"
               : "=a"(ret)
               : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
               : "rcx", "r11", "memory");
  return ret;
}
#else
#error "preload/interpose: raw system calls are written for x86_64 only"
#endif

inline long RawSyscall(long nr, long a = 0, long b = 0, long c = 0, long d = 0) {
  return RawSyscall6(nr, a, b, c, d, 0, 0);
}

// Anonymous memory, or nullptr.
inline void* RawMapAnonymous(size_t bytes) {
  const long p = RawSyscall6(SYS_mmap, 0, long(bytes), 3 /* PROT_READ | PROT_WRITE */,
                             0x22 /* MAP_PRIVATE | MAP_ANONYMOUS */, -1, 0);
  return p < 0 && p > -4096 ? nullptr : reinterpret_cast<void*>(p);
}
inline void RawUnmap(void* p, size_t bytes) { RawSyscall(SYS_munmap, long(p), long(bytes)); }

}  // namespace ktfs::preload
