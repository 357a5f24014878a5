#include "operator/manager/failpoints.h"

#include <gtest/gtest.h>

namespace c4::op {
namespace {

TEST(Failpoints, EmptySpecActivatesNothing) {
  auto fp = Failpoints::parse("");
  ASSERT_TRUE(fp) << fp.error().toString();
  EXPECT_TRUE(fp->empty());
  EXPECT_EQ(fp->action(kFailpointAfterStatus), FailpointAction::kOff);
  EXPECT_EQ(fp->describe(), "");
}

TEST(Failpoints, ParsesSeveralEntriesWithSpacesAndEmptyParts) {
  auto fp = Failpoints::parse(" after-restart-status = kill ;; after-status=off; ");
  ASSERT_TRUE(fp) << fp.error().toString();
  EXPECT_FALSE(fp->empty());
  EXPECT_EQ(fp->action(kFailpointAfterRestartStatus), FailpointAction::kKill);
  EXPECT_EQ(fp->action(kFailpointAfterStatus), FailpointAction::kOff);
  EXPECT_EQ(fp->describe(), "after-restart-status=kill;after-status=off");
}

TEST(Failpoints, TheOwedCordonPointIsKnown) {
  auto fp = Failpoints::parse("after-cordon-owed=kill");
  ASSERT_TRUE(fp) << fp.error().toString();
  EXPECT_EQ(fp->action(kFailpointAfterCordonOwed), FailpointAction::kKill);
  EXPECT_EQ(fp->action(kFailpointAfterStatus), FailpointAction::kOff);
}

TEST(Failpoints, TheUnconfirmedFindingPointIsKnown) {
  auto fp = Failpoints::parse("after-finding-pending=kill");
  ASSERT_TRUE(fp) << fp.error().toString();
  EXPECT_EQ(fp->action(kFailpointAfterFindingPending), FailpointAction::kKill);
  EXPECT_EQ(fp->action(kFailpointAfterCordonOwed), FailpointAction::kOff);
}

TEST(Failpoints, LaterEntryWins) {
  auto fp = Failpoints::parse("after-status=kill;after-status=off");
  ASSERT_TRUE(fp);
  EXPECT_EQ(fp->action(kFailpointAfterStatus), FailpointAction::kOff);
}

TEST(Failpoints, BadEntriesAreClearErrors) {
  auto no_eq = Failpoints::parse("after-status");
  ASSERT_FALSE(no_eq);
  EXPECT_EQ(no_eq.error().code, ErrorCode::kInvalidArgument);
  EXPECT_NE(no_eq.error().message.find("not name=action"), std::string::npos);

  auto unknown = Failpoints::parse("after-stauts=kill");
  ASSERT_FALSE(unknown);
  EXPECT_NE(unknown.error().message.find("unknown failpoint \"after-stauts\""), std::string::npos)
      << unknown.error().message;
  EXPECT_NE(unknown.error().message.find("after-restart-status"), std::string::npos);

  auto action = Failpoints::parse("after-status=panic");
  ASSERT_FALSE(action);
  EXPECT_NE(action.error().message.find("expected kill or off"), std::string::npos);
}

}  // namespace
}  // namespace c4::op
