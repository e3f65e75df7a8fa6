// core/exec/profile: the per-operator table printed with COHORT_PROFILE=1.
#include "core/exec/profile.h"

#include <gtest/gtest.h>

namespace cohort {
namespace {

TEST(OpProfile, ReportListsOperatorsLargestFirstWithTheirShare) {
  OpProfile::add("test_op_small", 0.001);
  OpProfile::add("test_op_large", 0.002);
  OpProfile::add("test_op_large", 0.001);
  std::string r = OpProfile::report();
  size_t large = r.find("test_op_large"), small = r.find("test_op_small");
  ASSERT_NE(large, std::string::npos) << r;
  ASSERT_NE(small, std::string::npos) << r;
  EXPECT_LT(large, small) << "largest first:\n" << r;
  // 3 ms over 2 calls: 1500 us per call.
  std::string line = r.substr(large, r.find('\n', large) - large);
  EXPECT_NE(line.find("2 calls"), std::string::npos) << line;
  EXPECT_NE(line.find("1500.0 us/call"), std::string::npos) << line;
  EXPECT_NE(r.find("total"), std::string::npos);
}

TEST(OpProfile, ResetForgetsWhatWasRecorded) {
  OpProfile::add("test_op_before_reset", 0.004);
  OpProfile::reset();
  EXPECT_EQ(OpProfile::report(), "");
  OpProfile::add("test_op_after_reset", 0.001);
  const std::string r = OpProfile::report();
  EXPECT_EQ(r.find("test_op_before_reset"), std::string::npos) << r;
  EXPECT_NE(r.find("test_op_after_reset"), std::string::npos) << r;
}

}  // namespace
}  // namespace cohort
