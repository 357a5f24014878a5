// Backoff jitter from an injected random source (apimachinery's wait.Jitter).
#include "kube/client/random.h"

#include <gtest/gtest.h>

namespace c4::kube {
namespace {

using std::chrono::milliseconds;

TEST(JitterTest, StretchesByUpToTheFactorAsDrawn) {
  EXPECT_EQ(jitter(milliseconds{1000}, 1.2, [] { return 0.5; }), milliseconds{1600});
  EXPECT_EQ(jitter(milliseconds{800}, 1.0, [] { return 0.0; }), milliseconds{800});
  EXPECT_EQ(jitter(milliseconds{800}, 0.0, [] { return 0.9; }), milliseconds{800})
      << "no factor, no jitter";
  EXPECT_EQ(jitter(milliseconds{800}, 1.0, [] { return 7.0; }), milliseconds{1600})
      << "a draw outside [0, 1) is clamped";
  EXPECT_EQ(jitter(milliseconds{800}, 1.0, RandomSource{}), milliseconds{800});
}

TEST(JitterTest, DefaultSourceDrawsFromTheUnitInterval) {
  RandomSource random = defaultRandomSource();
  double low = 1.0;
  double high = 0.0;
  for (int i = 0; i < 1000; ++i) {
    double x = random();
    ASSERT_GE(x, 0.0);
    ASSERT_LT(x, 1.0);
    low = std::min(low, x);
    high = std::max(high, x);
  }
  EXPECT_LT(low, 0.1);
  EXPECT_GT(high, 0.9);
}

}  // namespace
}  // namespace c4::kube
