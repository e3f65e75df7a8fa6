// Data parallelism's device communicator, on any machine: without a usable GPU (or NCCL) the
// plan falls back to host copies and says why; DataParallel::attach checks which communicator
// takes which buffers. With a GPU, tests/gpu and multirank.dp.*-cuda run the device paths.
#include <gtest/gtest.h>

#include "core/base/error.h"
#include "core/device/device.h"
#include "core/parallel/data_parallel.h"
#include "core/parallel/device_comm.h"
#include "tests/support/expect_error.h"
#include "tests/support/world_of_one.h"
#include "tests/unit/core/parallel/dp_reference.h"

namespace cohort::parallel {
namespace {

namespace coll = transport::coll;

// A communicator that claims CUDA buffers and never runs an operation: for attach's checks only.
class DeviceBufferComm final : public coll::Communicator {
 public:
  DeviceBufferComm(int rank, int size) : coll::Communicator(rank, size, "fake-device") {}
  coll::Backend backend() const override { return coll::Backend::kNccl; }
  coll::BufferMemory memory() const override { return coll::BufferMemory::kCuda; }
  std::shared_ptr<coll::Communicator> split(int, int, const std::string&) override { return nullptr; }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
  Status status(std::string*, int*) const override { return Status::kOk; }
  void abort(const std::string&) override {}
  void keep_alive(std::shared_ptr<void>) override {}

 protected:
  coll::WorkPtr start_all_reduce(const void*, void*, size_t, coll::DataType, coll::ReduceOp) override { return none(); }
  coll::WorkPtr start_reduce_scatter(const void*, void*, size_t, coll::DataType, coll::ReduceOp) override {
    return none();
  }
  coll::WorkPtr start_all_gather(const void*, void*, size_t, coll::DataType) override { return none(); }
  coll::WorkPtr start_broadcast(void*, size_t, coll::DataType, int) override { return none(); }
  coll::WorkPtr start_all_to_all(const void*, void*, size_t, coll::DataType) override { return none(); }
  coll::WorkPtr start_barrier() override { return none(); }
  coll::WorkPtr start_send(const void*, size_t, coll::DataType, int) override { return none(); }
  coll::WorkPtr start_recv(void*, size_t, coll::DataType, int) override { return none(); }
  void apply_timeout(std::chrono::milliseconds) override {}

 private:
  static coll::WorkPtr none() { throw Error(Status::kInternal, "the fake device communicator ran an operation"); }
};

TEST(DeviceCommunicator, NoneWhereThisProcessCannotMakeOneAndTheReasonSaid) {
  std::string reason;
  if (device_communicator_available(&reason)) GTEST_SKIP() << "this machine can make NCCL communicators";
  EXPECT_FALSE(reason.empty());
  const test::WorldOfOne w = test::world_of_one();
  std::string why;
  EXPECT_EQ(make_device_communicator(*w.comm, w.store, &why), nullptr);
  EXPECT_EQ(why, reason);
  test::expect_error([&] { make_device_communicator(*w.comm, nullptr); }, Status::kInvalidArgument,
                     "no rendezvous store");
}

TEST(DataParallel, AttachChecksWhichCommunicatorTakesWhichBuffers) {
  const test::WorldOfOne w = test::world_of_one();
  TrainerOptions o;
  o.num_threads = 1;
  Trainer t(test::dp_model(test::kShard), test::dp_inner_optimizer(), o);
  auto device_comm = std::make_shared<DeviceBufferComm>(0, 1);
  test::expect_error([&] { DataParallel::attach(t, PlanConfig{}, device_comm); }, Status::kInvalidArgument,
                     {"communicator 'fake-device' takes device buffers", "pass a host communicator"});
  test::expect_error([&] { DataParallel::attach(t, PlanConfig{}, w.comm, device_comm); }, Status::kInvalidArgument,
                     "a device communicator was given but the trainer runs on cpu");
  test::expect_error([&] { DataParallel::attach(t, PlanConfig{}, w.comm, w.comm); }, Status::kInvalidArgument,
                     "must take CUDA buffers");
  auto other_ranks = std::make_shared<DeviceBufferComm>(1, 2);
  test::expect_error([&] { DataParallel::attach(t, PlanConfig{}, w.comm, other_ranks); }, Status::kInvalidArgument,
                     "(rank 1 of 2 against 0 of 1)");
  EXPECT_EQ(t.step_hook(), nullptr);  // nothing installed by a refused attach
}

}  // namespace
}  // namespace cohort::parallel
