#include "loom/comm/shm/shm_segment.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <thread>

namespace loom::comm::shm {
namespace {

SegmentSpec Spec(int rank, int size, const std::string& id, int64_t timeout_ms) {
  SegmentSpec s;
  s.rank = rank;
  s.size = size;
  s.group_id = id;
  s.secret = "secret";
  s.slot_bytes = 4096;
  s.mailbox_bytes = 4096;
  s.spin_ns = 10'000;
  s.deadline_ns = tcp::NowNanos() + timeout_ms * 1'000'000;
  return s;
}

std::string UniqueId(const char* what) { return StrCat("shm-test-", what, "-", ::getpid()); }

TEST(ShmSegmentTest, TwoProcessesAttachAndSeeEachOther) {
  const std::string id = UniqueId("attach");
  const pid_t child = ::fork();
  if (child == 0) {
    auto seg = Segment::Open(Spec(1, 2, id, 5000));
    ::_exit(seg.ok() ? 0 : 1);
  }
  auto seg = Segment::Open(Spec(0, 2, id, 5000));
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(seg.ok()) << seg.status().ToString();
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ((*seg)->control(1).pid.load(), child);
}

TEST(ShmSegmentTest, ASecondGroupWithTheSameIdIsRefusedWhileTheFirstRuns) {
  const std::string id = UniqueId("in-use");
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t child = ::fork();
  if (child == 0) {
    // Rank 0 of a two-rank group whose rank 1 never comes: it waits until its deadline.
    ::close(ready[0]);
    SegmentSpec s = Spec(0, 2, id, 3000);
    std::thread([&] {
      ::usleep(200'000);
      (void)!::write(ready[1], "x", 1);
    }).detach();
    auto seg = Segment::Open(s);
    ::_exit(seg.ok() ? 0 : 3);
  }
  ::close(ready[1]);
  char c;
  ASSERT_EQ(::read(ready[0], &c, 1), 1);
  auto second = Segment::Open(Spec(0, 2, id, 500));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.status().message().find("in use by a running group"), std::string::npos)
      << second.status().message();
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  EXPECT_EQ(WEXITSTATUS(status), 3);  // its own attach timed out
}

TEST(ShmSegmentTest, RankWithoutRankZeroTimesOut) {
  const auto start = tcp::NowNanos();
  auto seg = Segment::Open(Spec(1, 2, UniqueId("alone"), 300));
  ASSERT_FALSE(seg.ok());
  EXPECT_EQ(seg.status().code(), StatusCode::kDeadlineExceeded);
  EXPECT_NE(seg.status().message().find("never created"), std::string::npos);
  EXPECT_LT(tcp::NowNanos() - start, 3'000'000'000);
}

}  // namespace
}  // namespace loom::comm::shm
