// Test helper: expect a call to throw cohort::Error with a status and a message fragment.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/base/error.h"

namespace cohort::test {

template <typename F>
void expect_error(F&& f, Status status, std::initializer_list<std::string> parts) {
  try {
    f();
    ADD_FAILURE() << "no error, expected " << status_name(status);
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), status) << status_name(e.status()) << ": " << e.what();
    for (const std::string& p : parts)
      EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << e.what() << "\nexpected to contain: " << p;
  }
}

template <typename F>
void expect_error(F&& f, Status status, const std::string& part) {
  expect_error(std::forward<F>(f), status, {part});
}

}  // namespace cohort::test
