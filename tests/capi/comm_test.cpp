// The communicator entry points in one process (a world of one) and their error paths.
// Multi-process behaviour is tested by tests/multirank/capi_comm.c under cohort-run.
#include <gtest/gtest.h>

#include <cohort/cohort.h>

#include <algorithm>
#include <cstdlib>

#include "tests/support/capi_expect.h"

namespace {

class CapiComm : public ::testing::Test {
 protected:
  void SetUp() override {
    // A world of one: no launcher variables.
    for (const char* v : {"COHORT_RANK", "COHORT_WORLD_SIZE", "RANK", "WORLD_SIZE", "OMPI_COMM_WORLD_RANK",
                          "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "PMI_RANK", "PMI_SIZE"})
      unsetenv(v);
    ASSERT_EQ(cohort_comm_create_from_env(nullptr, &comm_), COHORT_OK) << cohort_last_error();
  }
  void TearDown() override { EXPECT_EQ(cohort_comm_destroy(comm_), COHORT_OK); }
  cohort_comm* comm_ = nullptr;
};

TEST_F(CapiComm, WorldOfOneCollectives) {
  int32_t rank = -1, size = -1;
  ASSERT_EQ(cohort_comm_rank(comm_, &rank, &size), COHORT_OK);
  EXPECT_EQ(rank, 0);
  EXPECT_EQ(size, 1);
  float in[3] = {1, 2, 3}, out[3] = {0, 0, 0};
  cohort_work* w = nullptr;
  ASSERT_EQ(cohort_comm_all_reduce(comm_, in, out, 3, COHORT_F32, COHORT_REDUCE_AVG, &w), COHORT_OK);
  ASSERT_EQ(cohort_work_wait(w, 10000), COHORT_OK);
  int32_t done = 0;
  ASSERT_EQ(cohort_work_test(w, &done), COHORT_OK);
  EXPECT_EQ(done, 1);
  ASSERT_EQ(cohort_work_destroy(w), COHORT_OK);
  EXPECT_EQ(out[2], 3.0f);
  ASSERT_EQ(cohort_comm_all_gather(comm_, in, out, 3, COHORT_F32, nullptr), COHORT_OK);
  ASSERT_EQ(cohort_comm_barrier(comm_, nullptr), COHORT_OK);
  ASSERT_EQ(cohort_comm_all_reduce(comm_, in, in, 0, COHORT_F32, COHORT_REDUCE_SUM, nullptr), COHORT_OK);
  cohort_comm* sub = reinterpret_cast<cohort_comm*>(0x1);
  ASSERT_EQ(cohort_comm_split(comm_, -1, 0, &sub), COHORT_OK);
  EXPECT_EQ(sub, nullptr);
  ASSERT_EQ(cohort_comm_split(comm_, 0, 0, &sub), COHORT_OK);
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(cohort_comm_destroy(sub), COHORT_OK);
  float* m = nullptr;
  ASSERT_EQ(cohort_comm_mem_alloc(comm_, 3 * sizeof(float), reinterpret_cast<void**>(&m)), COHORT_OK)
      << cohort_last_error();
  std::copy(in, in + 3, m);
  ASSERT_EQ(cohort_comm_all_reduce(comm_, m, m, 3, COHORT_F32, COHORT_REDUCE_SUM, nullptr), COHORT_OK);
  EXPECT_EQ(m[2], 3.0f);
  EXPECT_EQ(cohort_comm_mem_free(comm_, m), COHORT_OK);
  int32_t failed = 7;
  EXPECT_EQ(cohort_comm_status(comm_, &failed), COHORT_OK);
  EXPECT_EQ(failed, -1);
}

TEST_F(CapiComm, ErrorPaths) {
  float buf[4] = {0};
  EXPECT_STATUS(cohort_comm_all_reduce(nullptr, buf, buf, 4, COHORT_F32, COHORT_REDUCE_SUM, nullptr),
                COHORT_ERR_INVALID_HANDLE, "cohort_comm_all_reduce: comm is NULL");
  EXPECT_STATUS(cohort_comm_all_reduce(comm_, buf, buf, 4, static_cast<cohort_dtype>(9), COHORT_REDUCE_SUM, nullptr),
                COHORT_ERR_INVALID_ARGUMENT, "dtype 9 is not a cohort_dtype");
  EXPECT_STATUS(cohort_comm_all_reduce(comm_, buf, buf, 4, COHORT_F32, static_cast<cohort_reduce_op>(5), nullptr),
                COHORT_ERR_INVALID_ARGUMENT, "op 5 is not a cohort_reduce_op");
  EXPECT_STATUS(cohort_comm_broadcast(comm_, buf, 4, COHORT_F32, 3, nullptr), COHORT_ERR_INVALID_ARGUMENT, "3");
  EXPECT_STATUS(cohort_comm_send(comm_, buf, 4, COHORT_F32, 1, nullptr), COHORT_ERR_INVALID_ARGUMENT, "1");
  EXPECT_STATUS(cohort_comm_all_reduce(comm_, nullptr, buf, 4, COHORT_F32, COHORT_REDUCE_SUM, nullptr),
                COHORT_ERR_INVALID_ARGUMENT, "all_reduce: null buffer for 4 elements");
  EXPECT_STATUS(cohort_comm_split(comm_, 0, 0, nullptr), COHORT_ERR_INVALID_ARGUMENT, "comm_out is NULL");
  void* mem = nullptr;
  EXPECT_STATUS(cohort_comm_mem_alloc(nullptr, 64, &mem), COHORT_ERR_INVALID_HANDLE, "comm is NULL");
  EXPECT_STATUS(cohort_comm_mem_alloc(comm_, 64, nullptr), COHORT_ERR_INVALID_ARGUMENT, "ptr_out is NULL");
  EXPECT_STATUS(cohort_comm_mem_alloc(comm_, 0, &mem), COHORT_ERR_INVALID_ARGUMENT, "allocate: 0 bytes");
  EXPECT_STATUS(cohort_comm_mem_free(comm_, buf), COHORT_ERR_INVALID_ARGUMENT, "not returned by allocate()");
  EXPECT_STATUS(cohort_comm_mem_free(comm_, nullptr), COHORT_ERR_INVALID_ARGUMENT, "ptr is NULL");
  EXPECT_STATUS(cohort_work_wait(nullptr, 0), COHORT_ERR_INVALID_HANDLE, "cohort_work_wait: work is NULL");
  EXPECT_STATUS(cohort_work_test(nullptr, nullptr), COHORT_ERR_INVALID_HANDLE, "work is NULL");
  cohort_work* w = nullptr;
  ASSERT_EQ(cohort_comm_barrier(comm_, &w), COHORT_OK);
  EXPECT_STATUS(cohort_work_wait(w, -5), COHORT_ERR_INVALID_ARGUMENT, "timeout_ms must be >= -1");
  EXPECT_STATUS(cohort_work_test(w, nullptr), COHORT_ERR_INVALID_ARGUMENT, "done_out is NULL");
  ASSERT_EQ(cohort_work_destroy(w), COHORT_OK);
  EXPECT_STATUS(cohort_work_wait(w, 0), COHORT_ERR_INVALID_HANDLE, "not a live cohort_work");
  EXPECT_EQ(cohort_work_destroy(nullptr), COHORT_OK);
  cohort_comm_options o = cohort_comm_options_default();
  o.timeout_ms = -1;
  cohort_comm* other = nullptr;
  EXPECT_STATUS(cohort_comm_create_from_env(&o, &other), COHORT_ERR_INVALID_ARGUMENT, "timeouts must be >= 0");
  EXPECT_STATUS(cohort_comm_create_from_env(nullptr, nullptr), COHORT_ERR_INVALID_ARGUMENT, "comm_out is NULL");
  // After abort every operation fails at once with the sticky error.
  ASSERT_EQ(cohort_comm_abort(comm_), COHORT_OK);
  EXPECT_NE(cohort_comm_barrier(comm_, nullptr), COHORT_OK);
  EXPECT_NE(cohort_comm_status(comm_, nullptr), COHORT_OK);
}

}  // namespace
