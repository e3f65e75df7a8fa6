// transport/ucx/peer_process: identities of this process and others, their FlatBuffers form,
// who can judge whom, and telling a running process from an exited, a zombie, or a reused pid.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "transport/ucx/peer_process.h"

namespace cohort::transport::ucx {
namespace {

TEST(PeerProcess, ThisProcessIsKnownAndRunning) {
  ProcessIdentity self = this_process();
  EXPECT_EQ(self.pid, static_cast<int64_t>(getpid()));
  EXPECT_FALSE(self.boot_id.empty());
  EXPECT_NE(self.pid_namespace, 0u);
  EXPECT_NE(self.start_ticks, 0u);
  EXPECT_TRUE(checkable_from(self, self));
  EXPECT_FALSE(process_ended(self));
}

TEST(PeerProcess, RoundTripsThroughBytes) {
  ProcessIdentity id{"boot-123", 4026531836u, 4242, 987654321u};
  auto back = decode(encode(id));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->boot_id, id.boot_id);
  EXPECT_EQ(back->pid_namespace, id.pid_namespace);
  EXPECT_EQ(back->pid, id.pid);
  EXPECT_EQ(back->start_ticks, id.start_ticks);
}

TEST(PeerProcess, RejectsBytesThatAreNoIdentity) {
  EXPECT_FALSE(decode(Bytes{}).has_value());
  EXPECT_FALSE(decode(Bytes{1, 2, 3}).has_value());
  Bytes good = encode(this_process());
  good.resize(good.size() / 2);  // truncated
  EXPECT_FALSE(decode(good).has_value());
}

TEST(PeerProcess, JudgesOnlyPeersOfTheSameBootAndPidNamespace) {
  ProcessIdentity self = this_process();
  ProcessIdentity other_host = self;
  other_host.boot_id = "another-boot";
  ProcessIdentity other_ns = self;
  other_ns.pid_namespace += 1;
  ProcessIdentity unknown_start = self;
  unknown_start.start_ticks = 0;
  EXPECT_FALSE(checkable_from(self, other_host));
  EXPECT_FALSE(checkable_from(self, other_ns));
  EXPECT_FALSE(checkable_from(self, unknown_start));
  EXPECT_FALSE(checkable_from(ProcessIdentity{}, self));  // this process unknown: judge nobody
}

// A child that waits for a signal; the caller kills and reaps it.
pid_t paused_child() {
  pid_t child = fork();
  if (child == 0) {
    pause();
    _exit(0);
  }
  return child;
}

TEST(PeerProcess, ZombieAndReapedChildHaveEnded) {
  pid_t child = paused_child();
  ASSERT_GT(child, 0);
  auto id = process_of(child);
  ASSERT_TRUE(id.has_value());
  EXPECT_FALSE(process_ended(*id));
  kill(child, SIGKILL);
  // Not reaped yet: a zombie, which has ended although its pid is still there.
  bool zombie = false;
  for (int i = 0; i < 200 && !zombie; ++i) {
    zombie = process_ended(*id);
    if (!zombie) usleep(5000);
  }
  EXPECT_TRUE(zombie);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(process_ended(*id));  // reaped: no such pid
}

TEST(PeerProcess, StoppedProcessHasNotEnded) {
  pid_t child = paused_child();
  ASSERT_GT(child, 0);
  auto id = process_of(child);
  ASSERT_TRUE(id.has_value());
  kill(child, SIGSTOP);
  usleep(20000);
  EXPECT_FALSE(process_ended(*id));  // frozen is not dead: only a deadline may name it
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

TEST(PeerProcess, ReusedPidIsAnotherProcess) {
  ProcessIdentity self = this_process();
  ProcessIdentity earlier = self;
  earlier.start_ticks = self.start_ticks - 1;  // same pid, started at another time
  EXPECT_TRUE(process_ended(earlier));
}

}  // namespace
}  // namespace cohort::transport::ucx
