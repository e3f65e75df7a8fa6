// Test helper for the C ABI: EXPECT_STATUS(call, status, fragment) checks the returned status and
// that cohort_last_error() contains the fragment.
#pragma once

#include <cohort/cohort.h>
#include <gtest/gtest.h>

#include <string>

namespace cohort::test {
inline std::string last_error() { return cohort_last_error(); }
}  // namespace cohort::test

#define EXPECT_STATUS(call, status, fragment)                                                          \
  do {                                                                                                 \
    cohort_status st_ = (call);                                                                        \
    EXPECT_EQ(st_, status) << #call << ": " << cohort_last_error();                                    \
    EXPECT_NE(::cohort::test::last_error().find(fragment), std::string::npos)                          \
        << "message: " << ::cohort::test::last_error() << "\nexpected to contain: " << (fragment);     \
  } while (0)
