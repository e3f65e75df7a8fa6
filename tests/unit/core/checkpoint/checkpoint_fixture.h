// Shared pieces of the checkpoint tests: a small classifier (optionally bf16, with dropout),
// deterministic batches, a scratch directory, and a byte snapshot of a trainer's whole state.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "core/checkpoint/checkpoint.h"
#include "core/exec/trainer.h"

namespace cohort::checkpoint::test_support {

struct ModelSpec {
  DType dtype = DType::kF32;
  int64_t batch = 8, in = 16, hidden = 32, classes = 4;
  double dropout = 0.25;  // 0: no dropout node
  bool extra_relu = false;  // a different forward graph with the same parameters
};

inline Graph make_model(const ModelSpec& s) {
  Graph g;
  ValueId x = g.add_input("x", s.dtype, {s.batch, s.in});
  ValueId y = g.add_input("y", DType::kI32, {s.batch});
  Initializer init{InitKind::kUniform, -0.3, 0.3, 11};
  ValueId w1 = g.add_parameter("fc1.weight", s.dtype, {s.hidden, s.in}, init);
  ValueId b1 = g.add_parameter("fc1.bias", s.dtype, {s.hidden}, Initializer{InitKind::kUniform, -0.1, 0.1, 12});
  ValueId w2 = g.add_parameter("fc2.weight", s.dtype, {s.classes, s.hidden}, init);
  ValueId b2 = g.add_parameter("fc2.bias", s.dtype, {s.classes}, Initializer{});
  ValueId h = g.add_op("linear", "fc1", {x, w1, b1}, Attrs()).at(0);
  h = g.add_op("relu", "act1", {h}, Attrs()).at(0);
  if (s.extra_relu) h = g.add_op("relu", "act1b", {h}, Attrs()).at(0);
  if (s.dropout > 0) {
    Attrs a;
    a.set("p", s.dropout);
    h = g.add_op("dropout", "drop1", {h}, a).at(0);
  }
  ValueId logits = g.add_op("linear", "fc2", {h, w2, b2}, Attrs()).at(0);
  ValueId loss = g.add_op("cross_entropy", "ce", {logits, y}, Attrs()).at(0);
  g.mark_output(logits);
  g.set_loss(loss);
  return g;
}

// Batch number `index`: values from a small LCG, labels from the inputs' signs.
inline std::map<std::string, Tensor> make_batch(const ModelSpec& s, int64_t index) {
  Tensor x = Tensor::empty({s.batch, s.in}, DType::kF32);
  Tensor y = Tensor::empty({s.batch}, DType::kI32);
  uint64_t state = 0x9E3779B97F4A7C15ull * static_cast<uint64_t>(index + 1);
  float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    xp[i] = static_cast<float>(static_cast<int64_t>(state >> 40) % 2001 - 1000) / 1000.0f;
  }
  for (int64_t r = 0; r < s.batch; ++r)
    y.data<int32_t>()[r] = static_cast<int32_t>((xp[r * s.in] > 0) + 2 * (xp[r * s.in + 1] > 0)) % s.classes;
  if (s.dtype == DType::kBF16) {
    Tensor xb = Tensor::empty(x.shape(), DType::kBF16);
    xb.copy_from(x);
    x = xb;
  }
  return {{"x", x}, {"y", y}};
}

// Every byte of a trainer's state, by name ("param:<name>", "state:<name>/<kind>", "step", ...).
inline std::map<std::string, std::vector<uint8_t>> snapshot(Trainer& t) {
  std::map<std::string, std::vector<uint8_t>> r;
  auto put = [&](const std::string& k, const void* p, size_t n) {
    const auto* b = static_cast<const uint8_t*>(p);
    r[k] = std::vector<uint8_t>(b, b + n);
  };
  for (size_t i = 0; i < t.parameters().size(); ++i)
    put("param:" + t.parameter_names()[i], t.parameters()[i].raw(), t.parameters()[i].nbytes());
  if (t.optimizer().state_bytes() > 0)
    for (size_t i = 0; i < t.optimizer().num_params(); ++i)
      for (auto& [name, tensor] : t.optimizer().state(i))
        put("state:" + t.parameter_names()[i] + "/" + name, tensor.raw(), tensor.nbytes());
  const int64_t step = t.step_count(), opt_step = t.optimizer().step_count();
  const uint64_t seed = t.seed();
  put("step", &step, sizeof(step));
  put("optimizer_step", &opt_step, sizeof(opt_step));
  put("seed", &seed, sizeof(seed));
  return r;
}

// A fresh directory, removed with everything in it at the end of the test: in /dev/shm when it
// exists (the rejection loops write thousands of small files), else in /tmp.
class ScratchDir {
 public:
  ScratchDir() {
    char shm[] = "/dev/shm/cohort_ckpt_XXXXXX";
    char tmp[] = "/tmp/cohort_ckpt_XXXXXX";
    char* p = ::mkdtemp(shm);
    if (p == nullptr) p = ::mkdtemp(tmp);
    EXPECT_NE(p, nullptr);
    path_ = p ? p : "/tmp";
  }
  ~ScratchDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::vector<uint8_t> read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline void write_file(const std::string& path, const uint8_t* data, size_t size) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(size));
}

}  // namespace cohort::checkpoint::test_support
