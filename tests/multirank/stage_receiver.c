/*
 * A rank that only receives its model: C11 and cohort.h alone, no model-building code. It makes
 * a pipeline plan over the whole communicator and cohort_trainer_create_parallel with graph NULL,
 * so world rank 0 (running tests/multirank/tp_rank in the same pipeline mode) cuts the model and
 * sends this rank its stages as verified graph files; then it trains on the batches tp_rank feeds
 * (tests/unit/core/parallel/tp_reference.h's tp_batch, recomputed here: the data pipeline is the
 * user's, the model is not) with the same optimizer and plan. Rank 0 compares its parameters with
 * a single process's, which holds only if this rank's stages trained right, since rank 0's
 * gradients come back through them. This rank checks that each step reports a finite loss and
 * prints what it received.
 *
 *   stage_receiver gpt|mlp [fence]
 */
#include <cohort/cohort.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/support/capi_check.h"

/* tp_rank's constants (tests/multirank/tp_rank.cpp) and tp_reference.h's models' data shapes. */
enum { kSteps = 4, kRows = 4, kGptContext = 8, kGptVocab = 32, kMlpFeatures = 12, kMlpClasses = 4 };

static uint64_t mix(int64_t a) { return ((uint64_t)a * 0x9E3779B97F4A7C15ull) >> 33; }

int main(int argc, char** argv) {
  const int gpt = argc > 1 && strcmp(argv[1], "gpt") == 0;
  const int fence = argc > 2 && strcmp(argv[2], "fence") == 0;
  if (argc < 2 || (!gpt && strcmp(argv[1], "mlp") != 0)) {
    fprintf(stderr, "usage: stage_receiver gpt|mlp [fence]\n");
    return 2;
  }
  cohort_comm_options co = cohort_comm_options_default();
  co.timeout_ms = 5000;
  cohort_comm* comm = NULL;
  CHECK(cohort_comm_create_from_env(&co, &comm));
  int32_t rank = 0, world = 1;
  CHECK(cohort_comm_rank(comm, &rank, &world));
  if (rank == 0) {
    fprintf(stderr, "stage_receiver: world rank 0 holds the model: run tp_rank there\n");
    return 2;
  }

  /* tp_rank's plan: DDP over a data axis of one, the world one pipeline (its cuts chosen by OP-Fence
   * from the probed links with `fence`, compression off), 2 x stages micro-batches (at most the
   * rows), every other field at its default. */
  cohort_plan_options po = cohort_plan_options_default();
  po.preset = COHORT_PRESET_DDP;
  po.pipeline_stages = world;
  po.micro_batches = 2 * world < kRows ? 2 * world : kRows;
  po.fence = fence;
  po.fence_compression_off = 1;
  cohort_plan* plan = NULL;
  CHECK(cohort_plan_create(&po, &plan));
  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.kind = COHORT_OPTIM_ADAMW;
  oo.lr = 3e-3;
  oo.weight_decay = 0.01;
  oo.clip_norm = 0.5;
  cohort_optimizer* opt = NULL;
  CHECK(cohort_optimizer_create(&oo, &opt));
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = 1 + (uint64_t)rank;
  to.num_threads = 1;
  cohort_trainer* trainer = NULL;
  CHECK(cohort_trainer_create_parallel(NULL, opt, plan, comm, &to, &trainer));

  int32_t ids[2][kRows * kGptContext];
  float x[kRows * kMlpFeatures];
  int32_t y[kRows];
  int64_t gpt_shape[2] = {kRows, kGptContext}, x_shape[2] = {kRows, kMlpFeatures}, y_shape[1] = {kRows};
  for (int64_t s = 0; s < kSteps; ++s) {
    cohort_tensor_ref in[2];
    if (gpt) {
      for (int64_t i = 0; i < kRows; ++i)
        for (int64_t t = 0; t < kGptContext; ++t) {
          const int64_t g = i * 131 + s * 7919 + t;
          ids[0][i * kGptContext + t] = (int32_t)(mix(g) % kGptVocab);
          ids[1][i * kGptContext + t] = (int32_t)(mix(g + 1) % kGptVocab);
        }
      in[0] = (cohort_tensor_ref){"tokens", COHORT_I32, 2, gpt_shape, ids[0], sizeof ids[0]};
      in[1] = (cohort_tensor_ref){"targets", COHORT_I32, 2, gpt_shape, ids[1], sizeof ids[1]};
    } else {
      for (int64_t i = 0; i < kRows; ++i) {
        const int64_t g = i * 7919 + s * 104729;
        for (int64_t f = 0; f < kMlpFeatures; ++f)
          x[i * kMlpFeatures + f] = sinf(0.37f * (float)(g % 1009) + 1.3f * (float)f);
        y[i] = (int32_t)(mix(g) % kMlpClasses);
      }
      in[0] = (cohort_tensor_ref){"x", COHORT_F32, 2, x_shape, x, sizeof x};
      in[1] = (cohort_tensor_ref){"y", COHORT_I32, 1, y_shape, y, sizeof y};
    }
    float loss = NAN;
    CHECK(cohort_trainer_step(trainer, in, 2, &loss));
    if (!isfinite(loss)) {
      fprintf(stderr, "rank %d: step %lld: loss %g is not finite\n", rank, (long long)s, loss);
      return 1;
    }
  }
  cohort_trainer_stats st;
  memset(&st, 0, sizeof st);
  st.size = sizeof st;
  CHECK(cohort_trainer_get_stats(trainer, &st));
  printf("rank %d: received its stages from world rank 0 and trained %lld steps (%lld parameter bytes with "
         "their optimizer state) -> ok\n",
         rank, (long long)st.step, (long long)st.parameter_bytes);
  fflush(stdout);
  CHECK(cohort_comm_barrier(comm, NULL)); /* as tp_rank ends: rank 0's store outlives every peer's use */
  CHECK(cohort_trainer_destroy(trainer));
  CHECK(cohort_optimizer_destroy(opt));
  CHECK(cohort_plan_destroy(plan));
  CHECK(cohort_comm_destroy(comm));
  return 0;
}
