// Randomness, injected like the clock: backoff jitter (the informer's list/watch retries, the
// leader elector's acquire loop) draws from a RandomSource, so tests pick the draws and stay
// deterministic while production spreads retries of many clients apart.
#pragma once

#include <functional>

#include "c4/common/clock.h"

namespace c4::kube {

// Returns a value uniformly distributed in [0, 1).
using RandomSource = std::function<double()>;

// A source seeded from std::random_device. Thread-safe (each call locks its generator).
RandomSource defaultRandomSource();

// apimachinery's wait.Jitter: d + d * max_factor * random(); max_factor <= 0 returns d. A draw
// outside [0, 1) is clamped into it.
Duration jitter(Duration d, double max_factor, const RandomSource& random);

}  // namespace c4::kube
