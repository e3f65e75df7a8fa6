// IDX reading: synthetic files (plain and gzip, valid, corrupt, truncated) and the real
// Fashion-MNIST files from Debian's dataset-fashion-mnist when installed.
#include "core/data/idx.h"

#include <sys/stat.h>

#include "tests/unit/core/data/data_test_util.h"

namespace cohort::data {
namespace {

using testing::expect_error;

class IdxTest : public ::testing::Test {
 protected:
  void SetUp() override { dir_ = testing::make_temp_dir(); }
  void TearDown() override { std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string path(const std::string& name) const { return dir_ + "/" + name; }
  std::string dir_;
};

TEST_F(IdxTest, ReadsGzipAndPlainImagesAndLabels) {
  std::vector<uint8_t> px = {0, 255, 51, 102, 0, 0, 255, 255, 1, 2, 3, 4};  // 3 images of 2x2
  testing::write_gzip(path("im.gz"), testing::idx_bytes({3, 2, 2}, px));
  testing::write_plain(path("lab"), testing::idx_bytes({3}, {7, 0, 9}));
  IdxImages im = read_idx_images(path("im.gz"));
  EXPECT_EQ(im.count, 3);
  EXPECT_EQ(im.rows, 2);
  EXPECT_EQ(im.cols, 2);
  ASSERT_EQ(im.pixels.size(), 12u);
  EXPECT_FLOAT_EQ(im.pixels[1], 1.0f);
  EXPECT_FLOAT_EQ(im.pixels[2], 0.2f);
  EXPECT_EQ(read_idx_labels(path("lab")), (std::vector<int32_t>{7, 0, 9}));
}

TEST_F(IdxTest, CorruptFilesNameTheFile) {
  auto bad_magic = testing::idx_bytes({2}, {1, 2});
  bad_magic[2] = 0x0D;  // float data
  testing::write_gzip(path("magic.gz"), bad_magic);
  expect_error([&] { read_idx_labels(path("magic.gz")); }, Status::kCorrupt,
               "'" + path("magic.gz") + "' has magic number 0x00000d01, expected 0x00000801");
  testing::write_gzip(path("rank.gz"), testing::idx_bytes({2, 1}, {1, 2}));
  expect_error([&] { read_idx_labels(path("rank.gz")); }, Status::kCorrupt, "expected 0x00000801");
  testing::write_gzip(path("short.gz"), testing::idx_bytes({2, 3, 3}, std::vector<uint8_t>(17, 1)));
  expect_error([&] { read_idx_images(path("short.gz")); }, Status::kCorrupt,
               "'" + path("short.gz") + "' is truncated: its data of shape [2, 3, 3] needs 18 bytes, the file ends "
               "after 17");
  testing::write_plain(path("header"), {0, 0, 8, 1, 0, 0});
  expect_error([&] { read_idx_labels(path("header")); }, Status::kCorrupt, "is truncated: its header needs 4 bytes");
  testing::write_gzip(path("long.gz"), testing::idx_bytes({2}, {1, 2, 3}));
  expect_error([&] { read_idx_labels(path("long.gz")); }, Status::kCorrupt, "has bytes after the 2 values");
  testing::write_gzip(path("zero.gz"), testing::idx_bytes({0, 28, 28}, {}));
  expect_error([&] { read_idx_images(path("zero.gz")); }, Status::kCorrupt, "has extent 0 in dimension 0");
  testing::write_gzip(path("huge.gz"), testing::idx_bytes({65535, 65535, 65535}, {}));
  expect_error([&] { read_idx_images(path("huge.gz")); }, Status::kCorrupt, "declares more than 2^32 values");
  testing::write_plain(path("empty"), {});
  expect_error([&] { read_idx_labels(path("empty")); }, Status::kCorrupt, "is truncated");
}

TEST_F(IdxTest, TruncatedGzipStream) {
  testing::write_gzip(path("full.gz"), testing::idx_bytes({400}, std::vector<uint8_t>(400, 3)));
  std::ifstream in(path("full.gz"), std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  ASSERT_GT(bytes.size(), 20u);
  bytes.resize(bytes.size() - 12);  // cut inside the deflate stream / trailer
  testing::write_plain(path("cut.gz"), std::vector<uint8_t>(bytes.begin(), bytes.end()));
  try {
    read_idx_labels(path("cut.gz"));
    ADD_FAILURE() << "a cut gzip stream was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kCorrupt) << e.what();
    EXPECT_NE(std::string(e.what()).find(path("cut.gz")), std::string::npos) << e.what();
  }
}

TEST_F(IdxTest, MissingFilesAndCountMismatch) {
  expect_error([&] { read_idx_labels(path("nope.gz")); }, Status::kIo,
               "cannot open '" + path("nope.gz") + "': No such file or directory");
  expect_error([&] { load_fashion_mnist(dir_, true); }, Status::kIo,
               "cannot open '" + dir_ + "/train-images-idx3-ubyte.gz': No such file or directory (Debian's package "
               "dataset-fashion-mnist installs Fashion-MNIST in /usr/share/datasets/fashion-mnist)");
  testing::write_gzip(path("t10k-images-idx3-ubyte.gz"), testing::idx_bytes({2, 2, 2}, std::vector<uint8_t>(8, 9)));
  testing::write_plain(path("t10k-labels-idx1-ubyte"), testing::idx_bytes({3}, {1, 2, 3}));  // plain works too
  expect_error([&] { load_fashion_mnist(dir_, false); }, Status::kCorrupt, "holds 2 images but '" + dir_ +
               "/t10k-labels-idx1-ubyte' holds 3 labels");
  testing::write_plain(path("t10k-labels-idx1-ubyte"), testing::idx_bytes({2}, {1, 2}));
  auto d = load_fashion_mnist(dir_, false);
  EXPECT_EQ(d->size(), 2);
  EXPECT_EQ(d->example_shape(0), (Shape{1, 2, 2}));
  EXPECT_EQ(d->name(), "fashion-mnist test");
}

bool fashion_installed() {
  struct stat st;
  return ::stat((std::string(kFashionMnistDir) + "/t10k-labels-idx1-ubyte.gz").c_str(), &st) == 0;
}

TEST(IdxReal, FashionMnistFromDebian) {
  if (!fashion_installed())
    GTEST_SKIP() << kFashionMnistDir << " is absent (apt-get install dataset-fashion-mnist)";
  auto test = load_fashion_mnist(kFashionMnistDir, false);
  ASSERT_EQ(test->size(), 10000);
  EXPECT_EQ(test->example_shape(0), (Shape{1, 28, 28}));
  std::vector<int64_t> per_class(10, 0);
  for (int32_t l : test->labels()) {
    ASSERT_GE(l, 0);
    ASSERT_LT(l, 10);
    ++per_class[static_cast<size_t>(l)];
  }
  for (int64_t n : per_class) EXPECT_EQ(n, 1000);  // Fashion-MNIST's test set is balanced
  EXPECT_EQ(test->labels()[0], 9);                 // the first test image is an ankle boot
  float lo = 1, hi = 0;
  for (float p : test->pixels()) lo = std::min(lo, p), hi = std::max(hi, p);
  EXPECT_EQ(lo, 0.0f);
  EXPECT_EQ(hi, 1.0f);
  auto train = load_fashion_mnist(kFashionMnistDir, true);
  EXPECT_EQ(train->size(), 60000);
}

}  // namespace
}  // namespace cohort::data
