// Helpers for the data tests: temporary directories, IDX and gzip writers, error expectations.
#pragma once

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "core/base/error.h"
#include "tests/support/expect_error.h"

namespace cohort::data::testing {

using ::cohort::test::expect_error;

inline std::string make_temp_dir() {
  char tmpl[] = "/tmp/cohort_data_test_XXXXXX";
  const char* d = mkdtemp(tmpl);
  EXPECT_NE(d, nullptr);
  return d ? d : "/tmp";
}

// Header + data of an unsigned-byte IDX file with the given extents.
inline std::vector<uint8_t> idx_bytes(const std::vector<uint32_t>& dims, const std::vector<uint8_t>& data) {
  std::vector<uint8_t> out = {0, 0, 0x08, static_cast<uint8_t>(dims.size())};
  for (uint32_t d : dims)
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(d >> s));
  out.insert(out.end(), data.begin(), data.end());
  return out;
}

inline void write_plain(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

inline void write_gzip(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  if (!bytes.empty()) {
    ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  }
  gzclose(f);
}

}  // namespace cohort::data::testing
