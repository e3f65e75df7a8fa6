// planner_predict: what the planner (core/parallel/planner.h) would choose to train GPT 1.3B,
// 2.7B, 6.7B and 13B on 64, 256 and 1024 H100-class GPUs, at three inter-node bandwidths. A
// PREDICTION from the analytical model, not a measurement: no parameter is allocated (the graphs
// are shapes), nothing is timed (nodes are priced at the described rates by count_node_work).
//
// The cluster described (each figure a choice, printed with the table):
//   - 8 GPUs per node; within a node an NVLink-class link of 300 GB/s per GPU, 5 us a collective;
//   - across nodes 25, 100 or 400 Gbit/s per GPU (one NIC per GPU, as in DGX H100-class nodes),
//     20 us a collective; collectives priced as rings (ring_comm_table);
//   - 400 TFLOP/s bf16 effective and 2 TB/s memory bandwidth per GPU (a node costs the larger of
//     flops / 400e12 and bytes / 2e12), 80 GB of memory per GPU.
// The models: GPT-2 style (pre-LN, tied embeddings, bf16 parameters with fp32 master and AdamW
// moments), context 2048, vocabulary 50304 (50257 padded to a multiple of 128, so that the
// tensor axes can cut it), a global batch of 512 sequences (1M tokens) per step:
//   1.3B: 24 layers, width 2048, 16 heads    2.7B: 32 layers, width 2560, 32 heads
//   6.7B: 32 layers, width 4096, 32 heads    13B:  40 layers, width 5120, 40 heads
// MFU: the model's FLOPs per step (6 N tokens + 12 L C T tokens for attention; Narayanan et al.
// 2021, without recomputation) over the step time and the GPUs' dense bf16 peak, 989 TFLOP/s.
//
// --mode co2|diloco|localsgd (with --tau, default 8) ranks the layouts under that data-parallel
// mode instead of sync: its outer synchronisation every tau steps (co2's hidden behind its
// overlap), and its ZeRO stages only inside shard groups (rank_plans).
//
// Usage: planner_predict [--models 1.3b,2.7b] [--worlds 64,256] [--gbits 25,100,400] [--top N]
//                        [--mode sync|localsgd|diloco|co2] [--tau N]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "core/base/error.h"
#include "core/models/gpt.h"
#include "core/parallel/planner.h"

using namespace cohort;
using namespace cohort::parallel;

namespace {

struct Model {
  const char* name;
  int64_t layers, width, heads;
};

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(item);
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Model> models = {{"1.3b", 24, 2048, 16}, {"2.7b", 32, 2560, 32}, {"6.7b", 32, 4096, 32},
                               {"13b", 40, 5120, 40}};
  std::vector<int> worlds = {64, 256, 1024};
  std::vector<double> gbits = {25, 100, 400};
  size_t top = 0;
  std::string mode_name_arg = "sync";
  int64_t tau = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i], value = argv[i + 1];
    if (flag == "--models") {
      std::vector<Model> keep;
      for (const std::string& m : split(value))
        for (const Model& x : models)
          if (m == x.name) keep.push_back(x);
      models = keep;
    } else if (flag == "--worlds") {
      worlds.clear();
      for (const std::string& w : split(value)) worlds.push_back(std::atoi(w.c_str()));
    } else if (flag == "--gbits") {
      gbits.clear();
      for (const std::string& g : split(value)) gbits.push_back(std::atof(g.c_str()));
    } else if (flag == "--top") {
      top = static_cast<size_t>(std::atoi(value.c_str()));
    } else if (flag == "--mode") {
      mode_name_arg = value;
    } else if (flag == "--tau") {
      tau = std::atoll(value.c_str());
    } else {
      std::fprintf(stderr,
                   "usage: %s [--models 1.3b,...] [--worlds 64,...] [--gbits 25,...] [--top N] "
                   "[--mode sync|localsgd|diloco|co2] [--tau N]\n",
                   argv[0]);
      return 2;
    }
  }
  PlanConfig mode;  // sync
  if (mode_name_arg == "co2") mode = preset(Preset::kCo2, tau);
  else if (mode_name_arg == "diloco") mode = preset(Preset::kDiLoCo, tau);
  else if (mode_name_arg == "localsgd") mode = preset(Preset::kLocalSgd, tau);
  else if (mode_name_arg != "sync") {
    std::fprintf(stderr, "planner_predict: unknown --mode '%s' (sync, localsgd, diloco, co2)\n", mode_name_arg.c_str());
    return 2;
  }
  if (tau < 1) {
    std::fprintf(stderr, "planner_predict: --tau must be >= 1\n");
    return 2;
  }
  constexpr int64_t kContext = 2048, kVocab = 50304, kBatch = 512;
  constexpr double kPeak = 989e12;
  std::printf("PREDICTION (planner model, not measured): GPT at context %lld, global batch %lld sequences, bf16 + AdamW;\n"
              "8 GPUs/node, 300 GB/s within a node, inter-node per GPU as listed; 400 TFLOP/s effective, 2 TB/s, "
              "80 GB per GPU; MFU against 989 TFLOP/s; data-parallel mode %s.\n\n",
              static_cast<long long>(kContext), static_cast<long long>(kBatch),
              mode.mode == SyncMode::kSync ? "sync" : str_cat(mode_name(mode.mode), " tau ", tau).c_str());
  std::printf("%-5s %5s %5s  %-58s %9s %6s %8s %6s  %-58s %9s\n", "model", "gpus", "Gb/s", "chosen plan", "step s",
              "MFU", "mem GiB", "plans", "runner-up (another layout)", "step s");
  const auto t_all = std::chrono::steady_clock::now();
  for (const Model& m : models) {
    models::GptConfig cfg;
    cfg.batch = kBatch;
    cfg.context = kContext;
    cfg.vocab = kVocab;
    cfg.layers = m.layers;
    cfg.width = m.width;
    cfg.heads = m.heads;
    cfg.dtype = DType::kBF16;
    const Graph model = models::build_gpt(cfg);
    const double n_params = static_cast<double>(models::gpt_parameter_count(cfg));
    const double tokens = static_cast<double>(kBatch * kContext);
    const double model_flops = 6 * n_params * tokens + 12.0 * m.layers * m.width * kContext * tokens;
    for (int world : worlds)
      for (double g : gbits) {
        ClusterSpec c;
        c.world = world;
        c.ranks_per_node = 8;
        c.memory_bytes_per_rank = 80e9;
        c.flops_per_second = 400e12;
        c.bytes_per_second = 2e12;
        c.comm = ring_comm_table(LinkSpec{300e9, 5e-6}, LinkSpec{g * 1e9 / 8, 20e-6}, "described H100 cluster");
        const std::vector<PlanPrediction> plans = rank_plans(model, c, WorkloadOptions{}, mode);
        if (plans.empty()) {
          std::printf("%-5s %5d %5.0f  no plan\n", m.name, world, g);
          continue;
        }
        const PlanPrediction& a = plans[0];
        // The runner-up: the best plan of another layout (data x pipe x grid), not the chosen one
        // with another ZeRO stage or micro-batch count.
        auto layout = [](const PlanConfig& p) {
          return std::make_tuple(p.data_parallel, p.pipeline.stages, p.tensor.x, p.tensor.y, p.tensor.z);
        };
        const PlanPrediction* b = nullptr;
        for (const PlanPrediction& p : plans)
          if (layout(p.plan) != layout(a.plan)) {
            b = &p;
            break;
          }
        const double mfu = model_flops / (a.step_seconds() * world * kPeak);
        std::printf("%-5s %5d %5.0f  %-58s %9.3f %5.1f%% %8.1f %6zu  %-58s %9.3f%s\n", m.name, world, g,
                    a.describe().c_str(), a.step_seconds(), 100 * mfu, a.memory_bytes / (1 << 30), plans.size(),
                    b ? b->describe().c_str() : "-", b ? b->step_seconds() : 0.0,
                    a.fits ? "" : "  (NOTHING FITS)");
        if (top > 0) std::printf("%s\n", format_plan_table(plans, top).c_str());
      }
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_all).count();
  std::printf("\n(%.1f s)\n", s);
  return 0;
}
