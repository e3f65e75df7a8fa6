// IDX reading through zlib; see idx.h.
#include "core/data/idx.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sys/stat.h>

#include "core/base/error.h"

namespace cohort::data {

namespace {

constexpr uint8_t kTypeUbyte = 0x08;
constexpr int64_t kMaxBytes = int64_t{1} << 32;  // 4 GiB: larger than any IDX dataset

bool file_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

// A gzip (or plain) file opened for reading; closed on every path.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path) {
    errno = 0;
    f_ = gzopen(path.c_str(), "rb");
    if (f_ == nullptr) {
      const int err = errno;
      throw_error(Status::kIo, str_cat("cannot open '", path, "': ", err ? std::strerror(err) : "gzopen failed"));
    }
  }
  ~GzFile() { gzclose(f_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  // Reads exactly n bytes; `what` names the part for the truncation message.
  void read(void* dst, int64_t n, const char* what) {
    auto* p = static_cast<uint8_t*>(dst);
    int64_t done = 0;
    while (done < n) {
      const auto chunk = static_cast<unsigned>(std::min<int64_t>(n - done, int64_t{1} << 30));
      const int got = gzread(f_, p + done, chunk);
      if (got < 0) corrupt_stream();
      if (got == 0) {
        throw_error(Status::kCorrupt, str_cat("'", path_, "' is truncated: its ", what, " needs ", n,
                                              " bytes, the file ends after ", done));
      }
      done += got;
    }
  }
  // True when nothing follows the data.
  bool at_end() {
    uint8_t b;
    const int got = gzread(f_, &b, 1);
    if (got < 0) corrupt_stream();
    return got == 0;
  }

 private:
  [[noreturn]] void corrupt_stream() {
    int code = 0;
    const char* msg = gzerror(f_, &code);
    throw_error(Status::kCorrupt, str_cat("'", path_, "' is not a readable gzip stream: ", msg));
  }
  std::string path_;
  gzFile f_ = nullptr;
};

uint32_t be32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

// Fails with kIo naming the path and the package that provides it when `path` is missing.
void check_fashion_file(const std::string& path) {
  COHORT_CHECK(file_exists(path), Status::kIo, "cannot open '", path,
               "': No such file or directory (Debian's package dataset-fashion-mnist installs Fashion-MNIST in ",
               kFashionMnistDir, ")");
}

}  // namespace

IdxArray read_idx(const std::string& path, int expected_rank) {
  GzFile f(path);
  uint8_t magic[4];
  f.read(magic, 4, "header");
  COHORT_CHECK(magic[0] == 0 && magic[1] == 0 && magic[2] == kTypeUbyte &&
                   magic[3] == static_cast<uint8_t>(expected_rank),
               Status::kCorrupt, "'", path, "' has magic number ", hex32(be32(magic)), ", expected ",
               hex32(0x800u + static_cast<uint32_t>(expected_rank)), " (unsigned bytes, ", expected_rank,
               " dimensions)");
  IdxArray a;
  std::vector<uint8_t> raw(static_cast<size_t>(4 * expected_rank));
  f.read(raw.data(), 4 * expected_rank, "header");
  int64_t total = 1;
  for (int d = 0; d < expected_rank; ++d) {
    const int64_t e = be32(raw.data() + 4 * d);
    COHORT_CHECK(e >= 1, Status::kCorrupt, "'", path, "' has extent 0 in dimension ", d);
    total *= e;
    COHORT_CHECK(total <= kMaxBytes, Status::kCorrupt, "'", path, "' declares more than 2^32 values");
    a.dims.push_back(e);
  }
  a.bytes.resize(static_cast<size_t>(total));
  f.read(a.bytes.data(), total, str_cat("data of shape ", a.dims).c_str());
  COHORT_CHECK(f.at_end(), Status::kCorrupt, "'", path, "' has bytes after the ", total, " values its header declares");
  return a;
}

IdxImages read_idx_images(const std::string& path) {
  IdxArray a = read_idx(path, 3);
  IdxImages im;
  im.count = a.dims[0], im.rows = a.dims[1], im.cols = a.dims[2];
  im.pixels.resize(a.bytes.size());
  for (size_t i = 0; i < a.bytes.size(); ++i) im.pixels[i] = static_cast<float>(a.bytes[i]) / 255.0f;
  return im;
}

std::vector<int32_t> read_idx_labels(const std::string& path) {
  IdxArray a = read_idx(path, 1);
  return std::vector<int32_t>(a.bytes.begin(), a.bytes.end());
}

std::unique_ptr<ImageDataset> load_fashion_mnist(const std::string& dir, bool train) {
  const std::string stem = dir + "/" + (train ? "train" : "t10k");
  auto pick = [](const std::string& name) {
    return file_exists(name + ".gz") || !file_exists(name) ? name + ".gz" : name;
  };
  const std::string images_path = pick(stem + "-images-idx3-ubyte");
  const std::string labels_path = pick(stem + "-labels-idx1-ubyte");
  check_fashion_file(images_path);
  check_fashion_file(labels_path);
  IdxImages images = read_idx_images(images_path);
  std::vector<int32_t> labels = read_idx_labels(labels_path);
  COHORT_CHECK(images.count == static_cast<int64_t>(labels.size()), Status::kCorrupt, "'", images_path, "' holds ",
               images.count, " images but '", labels_path, "' holds ", labels.size(), " labels");
  std::string name = std::string("fashion-mnist ") + (train ? "train" : "test");
  return std::make_unique<ImageDataset>(name, Shape{1, images.rows, images.cols}, std::move(images.pixels),
                                        std::move(labels));
}

}  // namespace cohort::data
