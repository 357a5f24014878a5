// The one place in the code base that reads the real clocks and sleeps on real time.
#include <new>
#include <thread>

#include "c4/common/clock.h"

namespace c4 {
namespace {

class RealClock final : public Clock {
 public:
  [[nodiscard]] MonoTime monoNow() const override { return std::chrono::steady_clock::now(); }
  [[nodiscard]] WallTime wallNow() const override { return std::chrono::system_clock::now(); }
  void sleepUntil(MonoTime deadline) override { std::this_thread::sleep_until(deadline); }
  bool waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                 MonoTime deadline, const std::function<bool()>& pred) override {
    return cv.wait_until(lock, deadline, pred);
  }
};

}  // namespace

Clock& realClock() {
  // Built in static storage on first use and never destroyed: usable from static destructors,
  // and nothing is left on the heap when a library holding this code (the NCCL plugin) is
  // unloaded with dlclose.
  alignas(RealClock) static unsigned char storage[sizeof(RealClock)];
  static RealClock* clock = ::new (storage) RealClock();
  return *clock;
}

}  // namespace c4
