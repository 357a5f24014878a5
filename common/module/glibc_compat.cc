// Linked into the NCCL plugin modules (libnccl-net-c4.so, libnccl-profiler-c4.so) only when
// libstdc++ is linked statically (C4_PLUGIN_STATIC_RUNTIME). A source both modules add, not part
// of libc4-common: only a module that links libstdc++ statically needs it.
//
// Debian 12's libstdc++.a refers to arc4random (glibc 2.36) from std::random_device, which the
// plugins do not use but the linker pulls in with the string code. That one reference would make
// the module refuse to load on glibc 2.34/2.35 (Ubuntu 22.04, RHEL 9), where GPU machines often
// are. This local definition satisfies it; the version script keeps it out of the dynamic symbol
// table, so the process's own arc4random is untouched.
#include <sys/random.h>

#include <cstdint>

extern "C" std::uint32_t arc4random() {
  std::uint32_t v = 0;
  while (::getrandom(&v, sizeof(v), 0) != static_cast<ssize_t>(sizeof(v))) {
  }
  return v;
}
