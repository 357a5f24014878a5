#include "kube/controller/expectations.h"

#include <gtest/gtest.h>

namespace c4::kube {
namespace {

using std::chrono::seconds;

TEST(CreationExpectationsTest, ExpectedUntilObservedWithTheSameVersion) {
  SimulatedClock clock;
  CreationExpectations e(seconds{15});
  EXPECT_FALSE(e.pending("Pod/ns/a-0", "0", clock.monoNow()));
  e.expect("Pod/ns/a-0", "0", clock.monoNow());
  EXPECT_TRUE(e.pending("Pod/ns/a-0", "0", clock.monoNow()));
  EXPECT_FALSE(e.pending("Pod/ns/a-0", "1", clock.monoNow())) << "another attempt of the name";
  EXPECT_FALSE(e.pending("Pod/ns/a-1", "0", clock.monoNow()));
  e.observed("Pod/ns/a-0", "1");  // the old attempt's deletion does not satisfy it
  EXPECT_TRUE(e.pending("Pod/ns/a-0", "0", clock.monoNow()));
  e.observed("Pod/ns/a-0", "0");
  EXPECT_FALSE(e.pending("Pod/ns/a-0", "0", clock.monoNow()));
  EXPECT_EQ(e.size(), 0u);
}

TEST(CreationExpectationsTest, LapsesAfterTheTtlSoALostEventDelaysARecreateOnlyThatLong) {
  SimulatedClock clock;
  CreationExpectations e(seconds{15});
  e.expect("Service/ns/a", "", clock.monoNow());
  clock.advance(seconds{14});
  EXPECT_TRUE(e.pending("Service/ns/a", "", clock.monoNow()));
  clock.advance(seconds{1});
  EXPECT_FALSE(e.pending("Service/ns/a", "", clock.monoNow()));
  EXPECT_EQ(e.size(), 0u);
}

TEST(CreationExpectationsTest, LapsedEntriesArePrunedSoDeletedJobsLeaveNothingBehind) {
  SimulatedClock clock;
  CreationExpectations e(seconds{15});
  for (int i = 0; i < 100; ++i) e.expect("Pod/ns/gone-" + std::to_string(i), "0", clock.monoNow());
  EXPECT_EQ(e.size(), 100u);
  clock.advance(seconds{16});
  e.expect("Pod/ns/new-0", "0", clock.monoNow());
  EXPECT_EQ(e.size(), 1u);
}

}  // namespace
}  // namespace c4::kube
