#include "c4/node_plugin/attribution.h"

#include <gtest/gtest.h>

#include <filesystem>

#include "test_util.h"

namespace c4::node {
namespace {

using testing::identityOf;
using testing::jobPod;
using testing::TempDir;
using testing::writeFile;

constexpr const char* kUid = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0";
constexpr const char* kUidUnderscore = "0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0";

TEST(CgroupParseTest, CgroupfsLayouts) {
  for (const std::string& path :
       {"/kubepods/pod" + std::string(kUid) + "/abcdef0123",
        "/kubepods/besteffort/pod" + std::string(kUid) + "/abcdef0123",
        "/kubepods/burstable/pod" + std::string(kUid) + "/abcdef0123",
        "/../../kubepods/burstable/pod" + std::string(kUid) + "/abcdef0123"}) {
    auto v1 = podUidFromCgroup("12:memory:" + path + "\n11:cpu,cpuacct:" + path + "\n");
    ASSERT_TRUE(v1.has_value()) << path;
    EXPECT_EQ(v1->value_or(""), kUid) << path;
    auto v2 = podUidFromCgroup("0::" + path + "\n");
    ASSERT_TRUE(v2.has_value());
    EXPECT_EQ(v2->value_or(""), kUid) << path;
  }
}

TEST(CgroupParseTest, SystemdLayouts) {
  const std::string u = kUidUnderscore;
  for (const std::string& path :
       {"/kubepods.slice/kubepods-pod" + u + ".slice/cri-containerd-0123abcd.scope",
        "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod" + u +
            ".slice/cri-containerd-0123abcd.scope",
        "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod" + u +
            ".slice/crio-0123.scope"}) {
    auto v2 = podUidFromCgroup("0::" + path + "\n");
    ASSERT_TRUE(v2.has_value());
    EXPECT_EQ(v2->value_or(""), kUid) << path;
    // cgroup v1: the pod appears on some hierarchy lines only.
    auto v1 = podUidFromCgroup("13:misc:/\n4:memory:" + path + "\n1:name=systemd:" + path + "\n");
    ASSERT_TRUE(v1.has_value());
    EXPECT_EQ(v1->value_or(""), kUid) << path;
  }
}

TEST(CgroupParseTest, NoPodAndMalformed) {
  for (std::string_view content :
       {"0::/\n", "0::/system.slice/containerd.service\n", "4:memory:/process_api/a1991a5\n",
        "0::/kubepods/podnot-a-uid/x\n", "0::/kubepods/pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0/x\n",
        "0::/kubepods-podzz1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice\n", "garbage", ""}) {
    auto r = podUidFromCgroup(content);
    ASSERT_TRUE(r.has_value()) << content;
    EXPECT_FALSE(r->has_value()) << content;
  }
}

TEST(CgroupParseTest, UpperCaseIsNormalised) {
  auto r = podUidFromCgroup("0::/kubepods/pod0F1E2D3C-4B5A-6978-8796-A5B4C3D2E1F0/c\n");
  ASSERT_TRUE(r.has_value());
  EXPECT_EQ(r->value_or(""), kUid);
}

TEST(CgroupParseTest, TwoPodsConflict) {
  auto r = podUidFromCgroup("1:cpu:/kubepods/pod" + std::string(kUid) +
                            "/c\n0::/kubepods/pod11111111-2222-3333-4444-555555555555/c\n");
  EXPECT_FALSE(r.has_value());
}

TEST(PodInfoTest, ReadsLabelsNodeAndNproc) {
  auto info = podInfoFromJson(jobPod("team", "job-1", kUid, "node-a", "job", 1, 2, 8));
  EXPECT_EQ(info.ns, "team");
  EXPECT_EQ(info.name, "job-1");
  EXPECT_EQ(info.uid, kUid);
  EXPECT_EQ(info.node, "node-a");
  EXPECT_EQ(info.job, "job");
  EXPECT_EQ(info.replica_index, "1");
  EXPECT_EQ(info.restart_attempt, "2");
  EXPECT_EQ(info.nproc_per_node, 8);
  EXPECT_EQ(podInfoFromJson(jobPod("team", "job-1", kUid, "node-a", "job", 1, 2)).nproc_per_node,
            1);
  EXPECT_EQ(podInfoFromJson(kube::Json::array()).name, "");  // not an object: empty, no crash
}

// A pod directory over a real informer Store, plus a fake /proc.
class AttributorTest : public ::testing::Test {
 protected:
  AttributorTest() : pods_(store_, [this] { return synced_; }) {
    StorePodDirectory::addIndexes(store_);
    store_.upsert(jobPod("team", "job-1", kUid, "node-a", "job", 1, 2, 4));
    store_.upsert(
        jobPod("team", "plain", "22222222-2222-2222-2222-222222222222", "node-a", "", 0, 0));
    auto plain = *store_.get("team/plain");
    plain["metadata"]["labels"] = kube::Json::object();
    store_.upsert(plain);
    // A pod the cache holds for another node (must never attribute here).
    store_.upsert(
        jobPod("team", "job-0", "33333333-3333-3333-3333-333333333333", "node-b", "job", 0, 2, 4));
    writeFile(proc_ / "100/cgroup", "0::/kubepods/burstable/pod" + std::string(kUid) + "/ctr\n");
    writeFile(proc_ / "101/cgroup", "0::/system.slice/sshd.service\n");
    writeFile(proc_ / "102/cgroup", "0::/kubepods/pod44444444-4444-4444-4444-444444444444/ctr\n");
    writeFile(proc_ / "103/cgroup", "0::/kubepods/pod33333333-3333-3333-3333-333333333333/c\n");
    writeFile(proc_ / "104/cgroup", "0::/kubepods/pod22222222-2222-2222-2222-222222222222/c\n");
    writeFile(proc_ / "105/cgroup",
              "1:cpu:/kubepods/pod" + std::string(kUid) +
                  "/c\n0::/kubepods/pod22222222-2222-2222-2222-222222222222/c\n");
  }
  Attributor make(AttributionMode mode, std::size_t max_remembered = 4096) {
    Attributor::Config c{"node-a", mode, proc_.path()};
    c.max_remembered = max_remembered;
    return Attributor(c, pods_, clock_);
  }
  void exits(pid_t pid) { std::filesystem::remove_all(proc_ / std::to_string(pid)); }
  static report::RankIdentity good() { return identityOf("team", "job-1", "node-a", "job", 5, 2); }

  SimulatedClock clock_;
  kube::Store store_;
  bool synced_ = true;
  StorePodDirectory pods_;
  TempDir proc_;
};

TEST_F(AttributorTest, CgroupPathAttributes) {
  auto a = make(AttributionMode::kAuto).attribute(100, good());
  ASSERT_TRUE(a.has_value()) << a.error().detail;
  EXPECT_EQ(a->path, AttributionPath::kCgroup);
  EXPECT_EQ(a->pod.name, "job-1");
  // Ranks 4..7 belong to replica 1 with 4 processes per pod.
  for (int rank : {4, 7}) {
    auto id = good();
    id.rank = rank;
    EXPECT_TRUE(make(AttributionMode::kCgroup).attribute(100, id).has_value()) << rank;
  }
}

DropReason dropOf(const std::expected<Attribution, Drop>& r) {
  EXPECT_FALSE(r.has_value());
  return r.has_value() ? DropReason::kDecode : r.error().reason;
}

TEST_F(AttributorTest, ForgedIdentitiesAreDropped) {
  const Attributor a = make(AttributionMode::kAuto);
  auto id = good();
  id.pod = "job-0";
  EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kPodMismatch);
  id = good();
  id.ns = "other";
  EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kPodMismatch);
  id = good();
  id.node = "node-b";
  EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kNodeMismatch);
  id = good();
  id.job = "other-job";
  EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kJobMismatch);
  for (int rank : {-1, 0, 3, 8, 100}) {
    id = good();
    id.rank = rank;
    EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kRankOutOfRange) << rank;
  }
  id = good();
  id.restart_attempt = 1;
  EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kAttemptMismatch);
}

TEST_F(AttributorTest, UnknownPidsAndPods) {
  const Attributor a = make(AttributionMode::kAuto);
  EXPECT_EQ(dropOf(a.attribute(999, good())), DropReason::kProcessGone);
  EXPECT_EQ(dropOf(a.attribute(0, good())), DropReason::kPidNotVisible);
  EXPECT_EQ(dropOf(a.attribute(102, good())), DropReason::kPodUnknown);
  EXPECT_EQ(dropOf(a.attribute(105, good())), DropReason::kCgroupConflict);
  // A pod on another node: its UID resolves, but it is not this node's.
  auto id = identityOf("team", "job-0", "node-a", "job", 0, 2);
  EXPECT_EQ(dropOf(a.attribute(103, id)), DropReason::kNodeMismatch);
  synced_ = false;
  EXPECT_EQ(dropOf(a.attribute(100, good())), DropReason::kPodsNotSynced);
}

TEST_F(AttributorTest, IdentityFallbackOnlyWhereCgroupNamesNoPod) {
  // Host process (no kubelet layout) claiming a pod on this node: auto falls back.
  auto a = make(AttributionMode::kAuto).attribute(101, good());
  ASSERT_TRUE(a.has_value()) << a.error().detail;
  EXPECT_EQ(a->path, AttributionPath::kIdentity);
  // cgroup mode never falls back.
  EXPECT_EQ(dropOf(make(AttributionMode::kCgroup).attribute(101, good())), DropReason::kNotAPod);
  // The fallback still checks everything.
  auto id = good();
  id.rank = 0;
  EXPECT_EQ(dropOf(make(AttributionMode::kAuto).attribute(101, id)), DropReason::kRankOutOfRange);
  // A claimed pod that does not exist, or runs on another node.
  id = identityOf("team", "nope", "node-a", "job", 5, 2);
  EXPECT_EQ(dropOf(make(AttributionMode::kAuto).attribute(101, id)), DropReason::kPodNotOnNode);
  id = identityOf("team", "job-0", "node-a", "job", 0, 2);
  EXPECT_EQ(dropOf(make(AttributionMode::kAuto).attribute(101, id)), DropReason::kPodNotOnNode);
  // Identity mode reads no cgroup: even a pid that does not exist attributes by identity.
  auto i = make(AttributionMode::kIdentity).attribute(999, good());
  ASSERT_TRUE(i.has_value());
  EXPECT_EQ(i->path, AttributionPath::kIdentity);
}

// A process's last datagram is often read after it exited: the cgroup its pid named at the
// newest read still attributes it, for the grace and no longer, and only where no cgroup can be
// read.
TEST_F(AttributorTest, AnExitedSendersDatagramIsAttributedByItsRememberedCgroup) {
  const Attributor a = make(AttributionMode::kCgroup);
  auto live = a.attribute(100, good());
  ASSERT_TRUE(live.has_value()) << live.error().detail;
  EXPECT_FALSE(live->remembered);
  exits(100);
  clock_.advance(std::chrono::seconds{9});
  auto gone = a.attribute(100, good());
  ASSERT_TRUE(gone.has_value()) << gone.error().detail;
  EXPECT_TRUE(gone->remembered);
  EXPECT_EQ(gone->path, AttributionPath::kCgroup);
  EXPECT_EQ(gone->pod.name, "job-1");
  // The memory passes the same checks as a read.
  auto id = good();
  id.pod = "job-0";
  EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kPodMismatch);
  id = good();
  id.rank = 0;
  EXPECT_EQ(dropOf(a.attribute(100, id)), DropReason::kRankOutOfRange);
  // A pid never read is not remembered; past the grace the memory is not used.
  EXPECT_EQ(dropOf(a.attribute(999, good())), DropReason::kProcessGone);
  clock_.advance(std::chrono::seconds{2});
  EXPECT_EQ(dropOf(a.attribute(100, good())), DropReason::kProcessGone);
}

TEST_F(AttributorTest, AReusedPidReadsItsOwnCgroup) {
  const Attributor a = make(AttributionMode::kCgroup);
  ASSERT_TRUE(a.attribute(100, good()).has_value());
  // Pid 100 exits and a process of pod team/plain gets the pid: it cannot speak for job-1.
  writeFile(proc_ / "100/cgroup", "0::/kubepods/pod22222222-2222-2222-2222-222222222222/c\n");
  EXPECT_EQ(dropOf(a.attribute(100, good())), DropReason::kPodMismatch);
  // ... and once it is gone too, what is remembered is its cgroup, not job-1's.
  exits(100);
  EXPECT_EQ(dropOf(a.attribute(100, good())), DropReason::kPodMismatch);
}

TEST_F(AttributorTest, AnExitedHostProcessFallsBackToItsIdentityAsBefore) {
  const Attributor a = make(AttributionMode::kAuto);
  ASSERT_TRUE(a.attribute(101, good()).has_value());
  exits(101);
  auto gone = a.attribute(101, good());
  ASSERT_TRUE(gone.has_value()) << gone.error().detail;
  EXPECT_EQ(gone->path, AttributionPath::kIdentity);
  EXPECT_TRUE(gone->remembered);
  // In cgroup mode a remembered "no pod" is still no pod.
  const Attributor c = make(AttributionMode::kCgroup);
  writeFile(proc_ / "101/cgroup", "0::/system.slice/sshd.service\n");
  EXPECT_EQ(dropOf(c.attribute(101, good())), DropReason::kNotAPod);
  exits(101);
  EXPECT_EQ(dropOf(c.attribute(101, good())), DropReason::kNotAPod);
}

TEST_F(AttributorTest, TheMemoryIsBoundedOldestReadFirst) {
  const Attributor a = make(AttributionMode::kAuto, 2);
  ASSERT_TRUE(a.attribute(100, good()).has_value());
  clock_.advance(std::chrono::milliseconds{10});
  ASSERT_TRUE(a.attribute(101, good()).has_value());
  clock_.advance(std::chrono::milliseconds{10});
  auto plain = identityOf("team", "plain", "node-a", "", -1, 0);
  ASSERT_TRUE(a.attribute(104, plain).has_value());
  EXPECT_EQ(a.remembered(), 2u);
  exits(100);
  exits(104);
  EXPECT_EQ(dropOf(a.attribute(100, good())), DropReason::kProcessGone);  // forgotten: oldest
  EXPECT_TRUE(a.attribute(104, plain).has_value());
}

TEST_F(AttributorTest, PodsWithoutJobLabel) {
  const Attributor a = make(AttributionMode::kCgroup);
  auto id = identityOf("team", "plain", "node-a", "", -1, 0);
  EXPECT_TRUE(a.attribute(104, id).has_value());
  id.job = "job";  // claiming a job from a pod that belongs to none
  EXPECT_EQ(dropOf(a.attribute(104, id)), DropReason::kJobMismatch);
}

TEST_F(AttributorTest, JobPodWithBadLabels) {
  auto pod = *store_.get("team/job-1");
  pod["metadata"]["labels"]["c4.dev/replica-index"] = "x";
  store_.upsert(pod);
  EXPECT_EQ(dropOf(make(AttributionMode::kAuto).attribute(100, good())),
            DropReason::kPodLabelsInvalid);
}

TEST(AttributionModeTest, Parse) {
  EXPECT_EQ(*parseAttributionMode("cgroup"), AttributionMode::kCgroup);
  EXPECT_EQ(*parseAttributionMode("identity"), AttributionMode::kIdentity);
  EXPECT_EQ(*parseAttributionMode("auto"), AttributionMode::kAuto);
  EXPECT_FALSE(parseAttributionMode("Cgroup").has_value());
  for (int i = 0; i < kDropReasonCount; ++i) {
    EXPECT_NE(dropReasonName(static_cast<DropReason>(i)), "unknown");
  }
}

}  // namespace
}  // namespace c4::node
