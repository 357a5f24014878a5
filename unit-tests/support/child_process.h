// Test helpers for tests that fork a child process.
#pragma once

#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>

#include <chrono>
#include <thread>

namespace c4::testing {

// Waits (real time) up to `limit` for `child` to exit by itself; kills it if it has not, so no
// test leaves a process behind. True when it exited by itself; `status` holds its wait status.
inline bool exitsWithin(pid_t child, std::chrono::milliseconds limit, int& status) {
  const auto step = std::chrono::milliseconds{10};
  for (auto waited = std::chrono::milliseconds{0}; waited < limit; waited += step) {
    if (::waitpid(child, &status, WNOHANG) == child) return true;
    std::this_thread::sleep_for(step);
  }
  if (::waitpid(child, &status, WNOHANG) == child) return true;
  ::kill(child, SIGKILL);
  ::waitpid(child, &status, 0);
  return false;
}

}  // namespace c4::testing
