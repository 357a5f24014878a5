// Time, injected. Every component that needs the time or needs to wait takes a `Clock&`.
//
// Two kinds of time: monotonic (intervals, timeouts, backoff, lease renewal) and wall (timestamps
// written to the API server and into reports). Waiting goes through the clock too, so that tests
// drive time with SimulatedClock::advance() and nothing in logic calls std::chrono::*::now() or
// std::this_thread::sleep_for directly (a CI check enforces this; real_clock.cc is the exception).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

namespace c4 {

using MonoTime = std::chrono::steady_clock::time_point;
using WallTime = std::chrono::system_clock::time_point;
using Duration = std::chrono::nanoseconds;

class Clock {
 public:
  virtual ~Clock() = default;

  // Monotonic now. Thread-safe, never blocks.
  [[nodiscard]] virtual MonoTime monoNow() const = 0;
  // Wall (UTC) now. Thread-safe, never blocks.
  [[nodiscard]] virtual WallTime wallNow() const = 0;

  // Blocks the caller until monoNow() >= deadline. Thread-safe.
  virtual void sleepUntil(MonoTime deadline) = 0;
  void sleepFor(Duration d) { sleepUntil(monoNow() + d); }

  // Waits on `cv` (whose mutex `lock` holds) until `pred()` is true or monoNow() >= deadline.
  // Returns pred() at exit, like std::condition_variable_any::wait_until. Whoever makes pred true
  // must notify `cv`; the clock itself wakes the waiter when (simulated) time reaches the deadline.
  virtual bool waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                         MonoTime deadline, const std::function<bool()>& pred) = 0;
  bool waitFor(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv, Duration d,
               const std::function<bool()>& pred) {
    return waitUntil(lock, cv, monoNow() + d, pred);
  }
};

// The process-wide real clock (steady_clock + system_clock). Never destroyed.
Clock& realClock();

// Deterministic clock for tests. Time moves only through advance()/setWall(). Waiters blocked in
// sleepUntil/waitUntil wake when advance() reaches their deadline. Thread-safe.
class SimulatedClock final : public Clock {
 public:
  // Starts at an arbitrary fixed monotonic origin and the given wall time.
  explicit SimulatedClock(WallTime wall_start = WallTime{std::chrono::seconds{1'700'000'000}});
  ~SimulatedClock() override;

  // Interface
  [[nodiscard]] MonoTime monoNow() const override;
  [[nodiscard]] WallTime wallNow() const override;
  void sleepUntil(MonoTime deadline) override;
  bool waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                 MonoTime deadline, const std::function<bool()>& pred) override;

  // Moves both monotonic and wall time forward by d (d >= 0) and wakes due waiters.
  void advance(Duration d);
  // Sets wall time only (monotonic time never goes back).
  void setWall(WallTime t);
  // Number of threads currently blocked in sleepUntil/waitUntil with a deadline.
  [[nodiscard]] int waiters() const;
  // Blocks (really) until at least n threads wait on this clock, or `real_timeout` of real time
  // passes; returns whether they do. Lets a test advance time only once a worker is parked.
  bool awaitWaiters(int n, std::chrono::milliseconds real_timeout = std::chrono::seconds{10});

 private:
  struct State;
  std::shared_ptr<State> state_;
};

// Nanoseconds since the Unix epoch of a wall time (for reports and logs).
inline std::int64_t toUnixNanos(WallTime t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}
inline WallTime fromUnixNanos(std::int64_t ns) {
  return WallTime{std::chrono::duration_cast<WallTime::duration>(std::chrono::nanoseconds{ns})};
}
// RFC 3339 UTC with seconds precision ("2026-12-02T11:00:09Z"), as Kubernetes metav1.Time wants.
std::string formatRfc3339(WallTime t);
// RFC 3339 with microseconds ("...T11:00:09.123456Z"), as metav1.MicroTime wants.
std::string formatRfc3339Micro(WallTime t);
// RFC 3339 "YYYY-MM-DDTHH:MM:SS[.frac]Z" (fraction ignored); nullopt when malformed.
std::optional<WallTime> parseRfc3339(const std::string& text);

}  // namespace c4
