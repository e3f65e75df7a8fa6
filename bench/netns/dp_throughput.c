/*
 * dp_throughput: training throughput of a small GPT under cohort's data-parallel plans, one
 * process per rank, started by netns.sh run (shaped links) or cohort-run (loopback). Only the C
 * ABI is used. Every rank builds the same GPT, feeds its own synthetic token batches (seeded by
 * rank) and runs --warmup untimed steps, then --steps timed steps, with
 *   --mode none      plain cohort_trainer_create: no communication in training (the anchor);
 *   --mode sync      cohort_trainer_create_parallel, preset DDP (gradients averaged every step);
 *   --mode localsgd  preset LOCALSGD, --tau T inner steps then a blocking outer average;
 *   --mode co2       preset CO2, --tau T, the outer average overlapped with the first --overlap N
 *                    steps of the next round (0: the preset's, 1; auto: chosen as it runs), its
 *                    pseudo-gradient sent in --outer-bits 32 (fp32), 8 or 4.
 * A second communicator split off the first carries only the start barrier and the final
 * reduction of the times, so it never queues behind the trainer's collectives. The timed
 * window is the slowest rank's. Rank 0 prints one machine-readable line:
 *   dp_throughput: mode=co2 ranks=2 tau=8 warmup=8 steps=32 params=N allreduce_bytes=B
 *     seconds=S steps_per_s=X step_ms=M comm_seconds=C wait_seconds=W hidden_fraction=H
 *     rounds=R loss_first=.. loss_last=.. overlap=O tau_now=T (co2: the last round's shape)
 * (comm/wait/hidden/rounds are rank 0's, over the timed window only: the stats after warm-up are
 * subtracted; they are 0 for --mode none, where hidden_fraction is printed as 1.)
 *   dp_throughput [--mode none|sync|localsgd|co2] [--tau T] [--overlap N|auto] [--outer-bits B]
 *                 [--steps S] [--warmup W]
 *                 [--layers L] [--width C] [--heads H] [--context T] [--batch B] [--vocab V]
 *                 [--bucket-mb M] [--threads N] [--seed S] [--timeout-ms T]
 * For localsgd and co2, --steps and --warmup must be multiples of --tau (whole rounds), except
 * under --overlap auto, which may lengthen co2's rounds. --overlap and --outer-bits are ignored by
 * the other modes.
 */
#include <cohort/cohort.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/support/capi_check.h"

typedef enum mode { MODE_NONE, MODE_SYNC, MODE_LOCALSGD, MODE_CO2 } mode;
static const char* const kModeNames[] = {"none", "sync", "localsgd", "co2"};

typedef struct options {
  mode mode;
  long tau, steps, warmup, overlap, outer_bits;
  long layers, width, heads, context, batch, vocab;
  double bucket_mb;
  int threads;
  unsigned long long seed;
  long timeout_ms;
} options;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void usage(void) {
  fprintf(stderr, "usage: dp_throughput [--mode none|sync|localsgd|co2] [--tau T] [--overlap N|auto]\n"
                  "         [--outer-bits B] [--steps S]\n"
                  "         [--warmup W]\n"
                  "         [--layers L] [--width C] [--heads H] [--context T] [--batch B] [--vocab V]\n"
                  "         [--bucket-mb M] [--threads N] [--seed S] [--timeout-ms T]\n");
  exit(2);
}

static options parse(int argc, char** argv) {
  options o = {MODE_NONE, 8, 32, 8, 0, 32, 2, 128, 4, 64, 16, 256, 25.0, 1, 1234, 120000};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) usage();
    if (!strcmp(a, "--mode")) {
      int found = 0;
      for (int m = 0; m < 4; ++m)
        if (!strcmp(v, kModeNames[m])) o.mode = (mode)m, found = 1;
      if (!found) usage();
    } else if (!strcmp(a, "--tau")) o.tau = atol(v);
    else if (!strcmp(a, "--overlap")) o.overlap = strcmp(v, "auto") ? atol(v) : -1;
    else if (!strcmp(a, "--outer-bits")) o.outer_bits = atol(v);
    else if (!strcmp(a, "--steps")) o.steps = atol(v);
    else if (!strcmp(a, "--warmup")) o.warmup = atol(v);
    else if (!strcmp(a, "--layers")) o.layers = atol(v);
    else if (!strcmp(a, "--width")) o.width = atol(v);
    else if (!strcmp(a, "--heads")) o.heads = atol(v);
    else if (!strcmp(a, "--context")) o.context = atol(v);
    else if (!strcmp(a, "--batch")) o.batch = atol(v);
    else if (!strcmp(a, "--vocab")) o.vocab = atol(v);
    else if (!strcmp(a, "--bucket-mb")) o.bucket_mb = atof(v);
    else if (!strcmp(a, "--threads")) o.threads = atoi(v);
    else if (!strcmp(a, "--seed")) o.seed = strtoull(v, NULL, 10);
    else if (!strcmp(a, "--timeout-ms")) o.timeout_ms = atol(v);
    else usage();
    ++i;
  }
  if (o.tau < 1 || o.steps < 1 || o.warmup < 0 || o.threads < 1 || o.vocab < 2 || o.context < 1 || o.batch < 1 ||
      o.bucket_mb <= 0 || o.timeout_ms < 1)
    usage();
  if ((o.mode == MODE_LOCALSGD || (o.mode == MODE_CO2 && o.overlap != -1)) && (o.steps % o.tau || o.warmup % o.tau)) {
    fprintf(stderr, "dp_throughput: --steps (%ld) and --warmup (%ld) must be multiples of --tau (%ld)\n", o.steps,
            o.warmup, o.tau);
    exit(2);
  }
  return o;
}

/* xorshift64*: the synthetic data stream of one rank. */
static uint64_t next_random(uint64_t* s) {
  *s ^= *s >> 12;
  *s ^= *s << 25;
  *s ^= *s >> 27;
  return *s * 2685821657736338717ull;
}

/* Random tokens; the target of each is the next token of a fixed rule (token + 1 mod V), so the
 * loss can fall and a broken update would show. */
static void fill_batch(int32_t* tokens, int32_t* targets, size_t n, long vocab, uint64_t* state) {
  for (size_t i = 0; i < n; ++i) {
    tokens[i] = (int32_t)(next_random(state) % (uint64_t)vocab);
    targets[i] = (int32_t)((tokens[i] + 1) % vocab);
  }
}

int main(int argc, char** argv) {
  options o = parse(argc, argv);
  CHECK(cohort_set_num_threads(o.threads));
  CHECK(cohort_set_log_level(1));

  cohort_comm_options co = cohort_comm_options_default();
  co.timeout_ms = o.timeout_ms;
  co.connect_timeout_ms = 60000;
  cohort_comm* comm = NULL;
  CHECK(cohort_comm_create_from_env(&co, &comm));
  int32_t rank = -1, size = -1;
  CHECK(cohort_comm_rank(comm, &rank, &size));
  /* The timing communicator: its barrier and reduction never wait behind the trainer's. */
  cohort_comm* timing = NULL;
  CHECK(cohort_comm_split(comm, 0, rank, &timing));

  cohort_model_gpt_options go = cohort_model_gpt_options_default();
  go.batch = o.batch;
  go.context = o.context;
  go.vocab = o.vocab;
  go.layers = o.layers;
  go.width = o.width;
  go.heads = o.heads;
  cohort_graph* graph = NULL;
  CHECK(cohort_graph_create_gpt(&go, &graph));
  int64_t params = 0;
  CHECK(cohort_graph_stats(graph, NULL, NULL, NULL, &params));

  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.kind = COHORT_OPTIM_ADAMW;
  oo.lr = 1e-3;
  cohort_optimizer* opt = NULL;
  CHECK(cohort_optimizer_create(&oo, &opt));
  cohort_trainer_options to = cohort_trainer_options_default();
  to.seed = o.seed;
  to.num_threads = o.threads;

  cohort_trainer* trainer = NULL;
  if (o.mode == MODE_NONE) {
    CHECK(cohort_trainer_create(graph, opt, &to, &trainer));
  } else {
    cohort_plan_options po = cohort_plan_options_default();
    po.preset = o.mode == MODE_SYNC ? COHORT_PRESET_DDP : o.mode == MODE_LOCALSGD ? COHORT_PRESET_LOCALSGD
                                                                                  : COHORT_PRESET_CO2;
    po.tau = o.mode == MODE_SYNC ? 1 : o.tau;
    po.bucket_bytes = (int64_t)(o.bucket_mb * 1024.0 * 1024.0);
    if (o.mode == MODE_CO2) po.overlap_steps = o.overlap, po.outer_bits = (int32_t)o.outer_bits;
    cohort_plan* plan = NULL;
    CHECK(cohort_plan_create(&po, &plan));
    CHECK(cohort_trainer_create_parallel(graph, opt, plan, comm, &to, &trainer));
    CHECK(cohort_plan_destroy(plan));
  }
  CHECK(cohort_graph_destroy(graph));
  CHECK(cohort_optimizer_destroy(opt));

  size_t n = (size_t)(o.batch * o.context);
  int32_t* tokens = malloc(n * sizeof *tokens);
  int32_t* targets = malloc(n * sizeof *targets);
  if (!tokens || !targets) return 1;
  int64_t shape[2] = {o.batch, o.context};
  cohort_tensor_ref in[2] = {{"tokens", COHORT_I32, 2, shape, tokens, n * sizeof *tokens},
                             {"targets", COHORT_I32, 2, shape, targets, n * sizeof *targets}};
  uint64_t state = 0x9E3779B97F4A7C15ull ^ (o.seed * 1000003ull + (uint64_t)rank * 7919ull + 1ull);
  float loss = 0.0f, loss_first = 0.0f;

  for (long s = 0; s < o.warmup; ++s) {
    fill_batch(tokens, targets, n, o.vocab, &state);
    CHECK(cohort_trainer_step(trainer, in, 2, &loss));
  }
  cohort_parallel_stats before;
  memset(&before, 0, sizeof before); /* zero every field, also ones appended in later versions */
  before.size = sizeof before;
  if (o.mode != MODE_NONE) CHECK(cohort_trainer_get_parallel_stats(trainer, &before));

  CHECK(cohort_comm_barrier(timing, NULL));
  double t0 = now();
  for (long s = 0; s < o.steps; ++s) {
    fill_batch(tokens, targets, n, o.vocab, &state); /* ~1 us: left inside the window */
    CHECK(cohort_trainer_step(trainer, in, 2, &loss));
    if (s == 0) loss_first = loss;
  }
  double elapsed = now() - t0;

  cohort_parallel_stats after;
  memset(&after, 0, sizeof after); /* zero every field, also ones appended in later versions */
  after.size = sizeof after;
  if (o.mode != MODE_NONE) CHECK(cohort_trainer_get_parallel_stats(trainer, &after));
  double comm_s = after.comm_seconds - before.comm_seconds;
  double wait_s = after.wait_seconds - before.wait_seconds;
  double hidden = comm_s > 0 ? 1.0 - wait_s / comm_s : 1.0;

  /* The slowest rank's window (every rank agrees); comm/wait/hidden are rank 0's own. */
  int64_t ns = (int64_t)(elapsed * 1e9);
  CHECK(cohort_comm_all_reduce(timing, &ns, &ns, 1, COHORT_I64, COHORT_REDUCE_MAX, NULL));
  double seconds = (double)ns * 1e-9;

  if (rank == 0) {
    printf("dp_throughput: mode=%s ranks=%d tau=%ld warmup=%ld steps=%ld params=%lld allreduce_bytes=%lld "
           "seconds=%.4f steps_per_s=%.4f step_ms=%.2f comm_seconds=%.4f wait_seconds=%.4f "
           "hidden_fraction=%.4f rounds=%lld loss_first=%.4f loss_last=%.4f overlap=%lld tau_now=%lld\n",
           kModeNames[o.mode], (int)size, o.mode == MODE_SYNC ? 1L : o.tau, o.warmup, o.steps, (long long)params,
           (long long)params * 4, seconds, (double)o.steps / seconds, 1e3 * seconds / (double)o.steps, comm_s, wait_s,
           hidden, (long long)(after.rounds - before.rounds), loss_first, loss, (long long)after.overlap_steps,
           (long long)after.tau);
    fflush(stdout);
  }
  free(tokens);
  free(targets);
  CHECK(cohort_trainer_destroy(trainer));
  CHECK(cohort_comm_destroy(timing));
  CHECK(cohort_comm_destroy(comm));
  return 0;
}
