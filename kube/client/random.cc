// Injected randomness for backoff jitter.
#include "kube/client/random.h"

#include <algorithm>
#include <memory>
#include <mutex>
#include <random>

namespace c4::kube {

RandomSource defaultRandomSource() {
  struct Generator {
    std::mutex mu;
    std::mt19937_64 engine{std::random_device{}()};
    std::uniform_real_distribution<double> uniform{0.0, 1.0};
  };
  auto generator = std::make_shared<Generator>();
  return [generator] {
    std::lock_guard lock(generator->mu);
    return generator->uniform(generator->engine);
  };
}

Duration jitter(Duration d, double max_factor, const RandomSource& random) {
  if (max_factor <= 0.0 || !random) return d;
  double draw = std::clamp(random(), 0.0, 1.0);
  return d + std::chrono::duration_cast<Duration>(std::chrono::duration<double, Duration::period>(
                 static_cast<double>(d.count()) * max_factor * draw));
}

}  // namespace c4::kube
