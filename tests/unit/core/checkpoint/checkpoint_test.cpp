// Checkpoint format and rejection: checksums, round trips of the extra section, and files that
// must be refused with the right status and message while the trainer keeps every byte —
// every truncation, every single-bit flip, another model or optimizer, bad magic, a newer
// version, a missing file, an unwritable directory, and a save that fails half-way.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>

#include <cstring>
#include <filesystem>

#include "core/base/error.h"
#include "core/checkpoint/format.h"
#include "tests/unit/core/checkpoint/checkpoint_fixture.h"

namespace cohort::checkpoint {
namespace {

using namespace test_support;

// A tiny model so that exhaustive truncation and bit-flip loops stay fast.
ModelSpec tiny() {
  ModelSpec m;
  m.batch = 2;
  m.in = 3;
  m.hidden = 2;
  m.classes = 2;
  return m;
}

optim::OptimizerConfig adamw() {
  optim::OptimizerConfig c;
  c.kind = optim::OptimizerKind::kAdamW;
  c.lr = 1e-2;
  return c;
}

// Loads path into t and returns the error; fails the test if it loads or t changed at all.
Error expect_rejected(Trainer& t, const std::string& path) {
  const auto before = snapshot(t);
  CheckpointExtra extra;
  extra.ints["untouched"] = 1;
  try {
    load_checkpoint(t, path, &extra);
  } catch (const Error& e) {
    EXPECT_EQ(snapshot(t), before) << "the trainer changed: " << e.what();
    EXPECT_EQ(extra.ints.size(), 1u);
    return e;
  }
  ADD_FAILURE() << "checkpoint '" << path << "' was accepted";
  return Error(Status::kOk, "");
}

class CheckpointFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    trainer_ = std::make_unique<Trainer>(make_model(tiny()), adamw(), TrainerOptions{5, 0});
    for (int s = 0; s < 3; ++s) trainer_->step(make_batch(tiny(), s));
    CheckpointExtra extra;
    extra.ints["sampler.position"] = 42;
    extra.blobs["sampler.state"] = {1, 2, 3, 4, 5};
    Tensor anchor = Tensor::empty({3}, DType::kF32);
    anchor.fill(1.5f);
    extra.tensors["co2.anchor"] = anchor;
    save_checkpoint(*trainer_, path(), extra);
    bytes_ = read_file(path());
    // The trainer that must reject: the same model, moved on so that a load would show.
    other_ = std::make_unique<Trainer>(make_model(tiny()), adamw(), TrainerOptions{6, 0});
    other_->step(make_batch(tiny(), 9));
  }
  std::string path() const { return dir_.file("a.ckpt"); }
  std::string bad() const { return dir_.file("bad.ckpt"); }

  ScratchDir dir_;
  std::unique_ptr<Trainer> trainer_, other_;
  std::vector<uint8_t> bytes_;
};

TEST(CheckpointFormat, Crc32cKnownValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  const std::string long_text(1000, 'x');
  EXPECT_EQ(crc32c(long_text.data() + 300, 700, crc32c(long_text.data(), 300)), crc32c(long_text.data(), 1000));
  EXPECT_NE(hash64("a", 1), hash64("b", 1));
}

TEST_F(CheckpointFiles, RoundTripOfEverything) {
  CheckpointExtra extra;
  load_checkpoint(*other_, path(), &extra);
  EXPECT_EQ(snapshot(*other_), snapshot(*trainer_));
  EXPECT_EQ(extra.ints, (std::map<std::string, int64_t>{{"sampler.position", 42}}));
  EXPECT_EQ(extra.blobs.at("sampler.state"), (std::vector<uint8_t>{1, 2, 3, 4, 5}));
  const Tensor& anchor = extra.tensors.at("co2.anchor");
  ASSERT_EQ(anchor.shape(), (Shape{3}));
  EXPECT_EQ(anchor.data<float>()[2], 1.5f);
  EXPECT_EQ(model_fingerprint(*other_), model_fingerprint(*trainer_));
}

TEST_F(CheckpointFiles, ExtraOfEveryKindAndEmptyEntries) {
  CheckpointExtra extra;
  extra.ints["a"] = -1;
  extra.ints["b"] = INT64_MAX;
  extra.blobs["empty"] = {};
  Tensor i64 = Tensor::empty({2, 2}, DType::kI64);
  for (int i = 0; i < 4; ++i) i64.data<int64_t>()[i] = 1000000000000LL * i;
  extra.tensors["i64"] = i64;
  extra.tensors["none"] = Tensor::empty({0, 5}, DType::kBF16);
  Tensor wide = Tensor::empty({2, 3}, DType::kF32);
  for (int i = 0; i < 6; ++i) wide.data<float>()[i] = static_cast<float>(i);
  extra.tensors["strided"] = wide.permuted({1, 0});  // saved contiguous
  save_checkpoint(*trainer_, path(), extra);
  CheckpointExtra back;
  load_checkpoint(*other_, path(), &back);
  EXPECT_EQ(back.ints, extra.ints);
  EXPECT_TRUE(back.blobs.at("empty").empty());
  EXPECT_EQ(std::memcmp(back.tensors.at("i64").raw(), i64.raw(), 32), 0);
  EXPECT_EQ(back.tensors.at("none").shape(), (Shape{0, 5}));
  const Tensor& s = back.tensors.at("strided");
  ASSERT_EQ(s.shape(), (Shape{3, 2}));
  EXPECT_EQ(s.data<float>()[1], 3.0f);  // element [0, 1] of the transpose
}

TEST_F(CheckpointFiles, EveryTruncationIsRejected) {
  for (size_t n = 0; n < bytes_.size(); ++n) {
    write_file(bad(), bytes_.data(), n);
    const Error e = expect_rejected(*other_, bad());
    ASSERT_EQ(e.status(), Status::kCorrupt) << "length " << n << ": " << e.what();
    ASSERT_NE(std::string(e.what()).find("checkpoint '" + bad() + "'"), std::string::npos) << e.what();
  }
  write_file(bad(), bytes_.data(), 40);
  EXPECT_NE(std::string(expect_rejected(*other_, bad()).what()).find("truncated"), std::string::npos);
  std::vector<uint8_t> longer = bytes_;
  longer.push_back(0);
  write_file(bad(), longer.data(), longer.size());
  EXPECT_NE(std::string(expect_rejected(*other_, bad()).what()).find("1 unexpected bytes"), std::string::npos);
}

// Header, manifest, padding and data are all covered: no flipped bit gets through. Every bit of
// the header, and one bit of every other byte (rotating through the 8 positions) to stay fast.
TEST_F(CheckpointFiles, EveryByteWithAFlippedBitIsRejected) {
  std::map<std::string, int> reasons;
  for (size_t i = 0; i < bytes_.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      if (i >= kHeaderSize && bit != static_cast<int>(i % 8)) continue;
      std::vector<uint8_t> b = bytes_;
      b[i] ^= static_cast<uint8_t>(1u << bit);
      write_file(bad(), b.data(), b.size());
      const Error e = expect_rejected(*other_, bad());
      ASSERT_EQ(e.status(), Status::kCorrupt) << "byte " << i << " bit " << bit << ": " << e.what();
      const std::string msg = e.what();
      for (const char* r : {"bad magic", "header checksum", "manifest checksum", "padding", "corrupted data"})
        if (msg.find(r) != std::string::npos) ++reasons[r];
    }
  }
  EXPECT_EQ(reasons["bad magic"], 64);
  EXPECT_GT(reasons["header checksum"], 0);
  EXPECT_GT(reasons["manifest checksum"], 0);
  EXPECT_GT(reasons["corrupted data"], 0);
  EXPECT_GT(reasons["padding"], 0);
}

// Past the checksums: manifest bytes changed and both CRCs recomputed, so the verifier and the
// field checks must hold the line. Some changes make a valid file (another step count, another
// extra name); every other one is refused without a change to the trainer, and none crashes.
TEST_F(CheckpointFiles, ManifestEditsWithValidChecksumsAreCheckedOrHarmless) {
  Header h;
  std::string reason;
  ASSERT_TRUE(decode_header(bytes_.data(), &h, &reason));
  int accepted = 0, rejected = 0;
  for (size_t i = kHeaderSize; i < kHeaderSize + h.manifest_length; ++i) {
    for (uint8_t value : {uint8_t{0}, uint8_t{0x7f}, uint8_t{0xff}, static_cast<uint8_t>(bytes_[i] + 1)}) {
      if (value == bytes_[i]) continue;
      std::vector<uint8_t> b = bytes_;
      b[i] = value;
      Header fixed = h;
      fixed.manifest_crc = crc32c(b.data() + kHeaderSize, h.manifest_length);
      encode_header(fixed, b.data());
      write_file(bad(), b.data(), b.size());
      const auto before = snapshot(*other_);
      try {
        load_checkpoint(*other_, bad(), nullptr);
        ++accepted;
        load_checkpoint(*other_, path(), nullptr);
      } catch (const Error& e) {
        ++rejected;
        ASSERT_EQ(snapshot(*other_), before) << "byte " << i << ": " << e.what();
        ASSERT_TRUE(e.status() == Status::kCorrupt || e.status() == Status::kInvalidArgument ||
                    e.status() == Status::kUnsupported)
            << e.what();
      }
    }
  }
  EXPECT_GT(rejected, accepted);
}

TEST_F(CheckpointFiles, AnotherModelIsNamed) {
  ModelSpec wider = tiny();
  wider.hidden = 3;
  Trainer t(make_model(wider), adamw(), TrainerOptions{});
  Error e = expect_rejected(t, path());
  EXPECT_EQ(e.status(), Status::kInvalidArgument);
  EXPECT_STREQ(e.what(), ("checkpoint '" + path() +
                          "' is for another model: parameter 'fc1.weight' has shape [2, 3] there, [3, 3] here")
                             .c_str());
  ModelSpec deeper = tiny();
  deeper.extra_relu = true;
  Trainer d(make_model(deeper), adamw(), TrainerOptions{});
  e = expect_rejected(d, path());
  EXPECT_EQ(e.status(), Status::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("is for another model: the parameters agree but the forward graph differs"),
            std::string::npos) << e.what();
  ModelSpec half = tiny();
  half.dtype = DType::kBF16;
  Trainer h(make_model(half), adamw(), TrainerOptions{});
  e = expect_rejected(h, path());
  EXPECT_NE(std::string(e.what()).find("parameter 'fc1.weight' has dtype f32 there, bf16 here"), std::string::npos)
      << e.what();
}

TEST_F(CheckpointFiles, AnotherOptimizerIsNamed) {
  optim::OptimizerConfig sgd;
  sgd.momentum = 0.9;
  Trainer s(make_model(tiny()), sgd, TrainerOptions{});
  Error e = expect_rejected(s, path());
  EXPECT_EQ(e.status(), Status::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("written with the adamw optimizer, this trainer uses sgd"), std::string::npos)
      << e.what();
  // Same kind, other state: SGD with momentum into SGD without.
  save_checkpoint(s, dir_.file("sgd.ckpt"), CheckpointExtra());
  s.step(make_batch(tiny(), 0));
  save_checkpoint(s, dir_.file("sgd.ckpt"), CheckpointExtra());
  Trainer plain(make_model(tiny()), optim::OptimizerConfig(), TrainerOptions{});
  e = expect_rejected(plain, dir_.file("sgd.ckpt"));
  EXPECT_EQ(e.status(), Status::kInvalidArgument);
  EXPECT_NE(std::string(e.what()).find("holds optimizer state 'fc1.weight/momentum' where this trainer's optimizer "
                                       "has (none)"),
            std::string::npos) << e.what();
}

TEST_F(CheckpointFiles, WrongMagicAndNewerVersion) {
  std::vector<uint8_t> b = bytes_;
  std::memcpy(b.data(), "GGUFGGUF", 8);
  write_file(bad(), b.data(), b.size());
  Error e = expect_rejected(*other_, bad());
  EXPECT_EQ(e.status(), Status::kCorrupt);
  EXPECT_STREQ(e.what(), ("checkpoint '" + bad() + "': not a cohort checkpoint (bad magic)").c_str());

  Header h;
  std::string reason;
  ASSERT_TRUE(decode_header(bytes_.data(), &h, &reason));
  h.version = kCheckpointFormatVersion + 1;
  b = bytes_;
  encode_header(h, b.data());
  write_file(bad(), b.data(), b.size());
  e = expect_rejected(*other_, bad());
  EXPECT_EQ(e.status(), Status::kUnsupported);
  EXPECT_NE(std::string(e.what()).find("format version 2 is newer than this build's 1"), std::string::npos);
}

TEST_F(CheckpointFiles, MissingFileAndDirectory) {
  Error e = expect_rejected(*other_, dir_.file("nope.ckpt"));
  EXPECT_EQ(e.status(), Status::kIo);
  EXPECT_STREQ(e.what(), ("checkpoint '" + dir_.file("nope.ckpt") + "': open failed: No such file or directory").c_str());
  e = expect_rejected(*other_, dir_.path());
  EXPECT_EQ(e.status(), Status::kIo);
  EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos);
}

// Runs as root in CI, where permissions do not stop writes: a path under a regular file does.
TEST_F(CheckpointFiles, UnwritableDirectoryNamesThePath) {
  const std::string target = path() + "/sub.ckpt";
  try {
    save_checkpoint(*trainer_, target, CheckpointExtra());
    FAIL() << "saved under a regular file";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kIo);
    EXPECT_NE(std::string(e.what()).find("checkpoint '" + target + "': open('" + target + ".tmp."),
              std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("Not a directory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(read_file(path()), bytes_);
}

// A save that fails half-way (the file size limit stops the write) leaves the previous
// checkpoint whole and no temporary file behind.
TEST_F(CheckpointFiles, FailedSaveKeepsThePreviousCheckpoint) {
  other_->step(make_batch(tiny(), 10));
  rlimit old;
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old), 0);
  auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old;
  small.rlim_cur = 200;  // header + part of the manifest
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  Status status = Status::kOk;
  std::string message;
  try {
    save_checkpoint(*other_, path(), CheckpointExtra());
  } catch (const Error& e) {
    status = e.status();
    message = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_EQ(status, Status::kIo);
  EXPECT_NE(message.find("checkpoint '" + path() + "': write("), std::string::npos) << message;
  EXPECT_EQ(read_file(path()), bytes_);
  int entries = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir_.path())) {
    (void)entry;
    ++entries;
  }
  EXPECT_EQ(entries, 1) << "a temporary file was left behind";
  CheckpointExtra extra;
  load_checkpoint(*other_, path(), &extra);  // still the complete old checkpoint
  EXPECT_EQ(snapshot(*other_), snapshot(*trainer_));
}

TEST_F(CheckpointFiles, BadExtraIsRefusedBeforeWriting) {
  CheckpointExtra extra;
  extra.tensors["undefined"] = Tensor();
  try {
    save_checkpoint(*other_, path(), extra);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_STREQ(e.what(), "save checkpoint: extra tensor 'undefined' is not a defined CPU tensor");
  }
  EXPECT_EQ(read_file(path()), bytes_);
}

}  // namespace
}  // namespace cohort::checkpoint
