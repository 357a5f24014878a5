#include <chrono>
#include <cstdio>
#include <ctime>
#include <stdexcept>

#include "c4/common/clock.h"

namespace c4 {

// A waiter in waitUntil() blocks on the caller's condition variable, which only the caller's code
// notifies. To see simulated time move without a lost-wakeup race against advance(), it re-checks
// every kPollPeriod of real time. sleepUntil() waiters are woken by advance() directly.
namespace {
constexpr auto kPollPeriod = std::chrono::milliseconds{2};
}

struct SimulatedClock::State {
  mutable std::mutex mu;
  std::condition_variable cv;  // signalled on every advance and waiter change
  MonoTime mono{std::chrono::hours{24}};
  WallTime wall;
  int waiters = 0;
};

SimulatedClock::SimulatedClock(WallTime wall_start) : state_(std::make_shared<State>()) {
  state_->wall = wall_start;
}

SimulatedClock::~SimulatedClock() = default;

MonoTime SimulatedClock::monoNow() const {
  std::lock_guard lock(state_->mu);
  return state_->mono;
}

WallTime SimulatedClock::wallNow() const {
  std::lock_guard lock(state_->mu);
  return state_->wall;
}

void SimulatedClock::sleepUntil(MonoTime deadline) {
  std::unique_lock lock(state_->mu);
  if (state_->mono >= deadline) return;
  ++state_->waiters;
  state_->cv.notify_all();
  state_->cv.wait(lock, [&] { return state_->mono >= deadline; });
  --state_->waiters;
  state_->cv.notify_all();
}

bool SimulatedClock::waitUntil(std::unique_lock<std::mutex>& lock, std::condition_variable_any& cv,
                               MonoTime deadline, const std::function<bool()>& pred) {
  {
    std::lock_guard g(state_->mu);
    ++state_->waiters;
    state_->cv.notify_all();
  }
  bool result = false;
  while (true) {
    if (pred()) {
      result = true;
      break;
    }
    if (monoNow() >= deadline) {
      result = pred();
      break;
    }
    cv.wait_for(lock, kPollPeriod);
  }
  {
    std::lock_guard g(state_->mu);
    --state_->waiters;
    state_->cv.notify_all();
  }
  return result;
}

void SimulatedClock::advance(Duration d) {
  if (d < Duration::zero())
    throw std::invalid_argument("SimulatedClock::advance: negative duration");
  std::lock_guard lock(state_->mu);
  state_->mono += d;
  state_->wall += std::chrono::duration_cast<WallTime::duration>(d);
  state_->cv.notify_all();
}

void SimulatedClock::setWall(WallTime t) {
  std::lock_guard lock(state_->mu);
  state_->wall = t;
}

int SimulatedClock::waiters() const {
  std::lock_guard lock(state_->mu);
  return state_->waiters;
}

bool SimulatedClock::awaitWaiters(int n, std::chrono::milliseconds real_timeout) {
  std::unique_lock lock(state_->mu);
  // Real time on purpose: this synchronises the test thread with worker threads.
  return state_->cv.wait_for(lock, real_timeout, [&] { return state_->waiters >= n; });
}

namespace {
std::string formatUtc(WallTime t, bool micro) {
  const auto secs = std::chrono::floor<std::chrono::seconds>(t);
  const std::time_t tt = std::chrono::system_clock::to_time_t(secs);
  std::tm tm{};
  gmtime_r(&tt, &tm);
  char buf[64];
  std::size_t n = std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%S", &tm);
  std::string out(buf, n);
  if (micro) {
    const auto us = std::chrono::duration_cast<std::chrono::microseconds>(t - secs).count();
    char frac[32];
    std::snprintf(frac, sizeof frac, ".%06lld", static_cast<long long>(us));
    out += frac;
  }
  out += 'Z';
  return out;
}
}  // namespace

std::string formatRfc3339(WallTime t) {
  return formatUtc(t, false);
}
std::string formatRfc3339Micro(WallTime t) {
  return formatUtc(t, true);
}

std::optional<WallTime> parseRfc3339(const std::string& text) {
  int y = 0, mo = 0, d = 0, h = 0, mi = 0, s = 0;
  if (std::sscanf(text.c_str(), "%4d-%2d-%2dT%2d:%2d:%2d", &y, &mo, &d, &h, &mi, &s) != 6) {
    return std::nullopt;
  }
  std::chrono::year_month_day ymd{std::chrono::year{y},
                                  std::chrono::month{static_cast<unsigned>(mo)},
                                  std::chrono::day{static_cast<unsigned>(d)}};
  if (!ymd.ok() || h > 23 || mi > 59 || s > 60) return std::nullopt;
  auto days = std::chrono::sys_days{ymd};
  return WallTime{std::chrono::duration_cast<WallTime::duration>(
      days.time_since_epoch() + std::chrono::hours{h} + std::chrono::minutes{mi} +
      std::chrono::seconds{s})};
}

}  // namespace c4
