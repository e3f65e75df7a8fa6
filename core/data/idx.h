// IDX files (LeCun's MNIST format, also used by Fashion-MNIST): a big-endian header — two zero
// bytes, a type byte (0x08 = unsigned byte), a dimension count, one u32 extent per dimension —
// then the data. Files may be gzip-compressed (as Debian's dataset-fashion-mnist ships them) or
// plain; zlib reads both. Anything malformed or truncated is kCorrupt naming the file; a missing
// file is kIo naming the path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data/dataset.h"

namespace cohort::data {

// Where Debian's dataset-fashion-mnist package puts the files.
inline constexpr const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> bytes;  // product(dims) values
};

// Reads an unsigned-byte IDX file with `expected_rank` dimensions (3 for images, 1 for labels).
IdxArray read_idx(const std::string& path, int expected_rank);

// Images scaled to [0, 1] as floats: [count, rows, cols].
struct IdxImages {
  int64_t count = 0, rows = 0, cols = 0;
  std::vector<float> pixels;
};
IdxImages read_idx_images(const std::string& path);
std::vector<int32_t> read_idx_labels(const std::string& path);

// Fashion-MNIST split from `dir` ("train": train-*, "test": t10k-*), images as [1, 28, 28].
// Each file is "<name>.gz" or, failing that, "<name>". Image and label counts must agree.
std::unique_ptr<ImageDataset> load_fashion_mnist(const std::string& dir, bool train);

}  // namespace cohort::data
