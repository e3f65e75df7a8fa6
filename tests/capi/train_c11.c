/*
 * A C11 program that uses only cohort.h: builds an MLP, trains it on a synthetic, learnable
 * classification task and checks that the loss falls and the accuracy rises. Compiled with
 * -std=c11 -Wall -Wextra -Werror to prove the header is plain C.
 */
#include <cohort/cohort.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                          \
  do {                                                                                       \
    cohort_status st_ = (call);                                                              \
    if (st_ != COHORT_OK) {                                                                  \
      fprintf(stderr, "%s:%d: %s -> %s\n", __FILE__, __LINE__, #call, cohort_last_error()); \
      return 1;                                                                              \
    }                                                                                        \
  } while (0)

enum { kBatch = 32, kIn = 8, kHidden = 16, kClasses = 3 };

/* Class k has its mean at +2 on feature k; noise is uniform. */
static void make_batch(unsigned* state, float* x, int32_t* y) {
  for (int i = 0; i < kBatch; ++i) {
    *state = *state * 1103515245u + 12345u;
    y[i] = (int32_t)((*state >> 16) % kClasses);
    for (int j = 0; j < kIn; ++j) {
      *state = *state * 1103515245u + 12345u;
      float noise = (float)((*state >> 16) & 0x7fff) / 32768.0f - 0.5f;
      x[i * kIn + j] = noise + (j == y[i] ? 2.0f : 0.0f);
    }
  }
}

static int add_linear(cohort_graph* g, const char* name, int32_t x, int64_t in, int64_t out, int32_t* y_out) {
  char w[32], b[32];
  snprintf(w, sizeof w, "%s.w", name);
  snprintf(b, sizeof b, "%s.b", name);
  int64_t ws[2] = {out, in}, bs[1] = {out};
  cohort_initializer init = cohort_initializer_default();
  init.kind = COHORT_INIT_XAVIER_UNIFORM;
  int32_t ids[3] = {x, 0, 0};
  CHECK(cohort_graph_add_parameter(g, w, COHORT_F32, ws, 2, &init, &ids[1]));
  CHECK(cohort_graph_add_parameter(g, b, COHORT_F32, bs, 1, NULL, &ids[2]));
  CHECK(cohort_graph_add_op(g, "linear", name, ids, 3, NULL, y_out, 1, NULL));
  return 0;
}

int main(void) {
  if (cohort_abi_version() / 10000 != COHORT_ABI_VERSION / 10000) return 1;
  cohort_graph* g = NULL;
  CHECK(cohort_graph_create(&g));
  int64_t xs[2] = {kBatch, kIn}, ys[1] = {kBatch};
  int32_t x, y, h, a, logits, loss;
  CHECK(cohort_graph_add_input(g, "x", COHORT_F32, xs, 2, &x));
  CHECK(cohort_graph_add_input(g, "y", COHORT_I32, ys, 1, &y));
  if (add_linear(g, "fc1", x, kIn, kHidden, &h)) return 1;
  CHECK(cohort_graph_add_op(g, "tanh", "act", &h, 1, NULL, &a, 1, NULL));
  if (add_linear(g, "fc2", a, kHidden, kClasses, &logits)) return 1;
  int32_t ce[2] = {logits, y};
  CHECK(cohort_graph_add_op(g, "cross_entropy", "loss", ce, 2, NULL, &loss, 1, NULL));
  CHECK(cohort_graph_mark_output(g, logits));
  CHECK(cohort_graph_set_loss(g, loss));

  cohort_optimizer_options oo = cohort_optimizer_options_default();
  oo.kind = COHORT_OPTIM_SGD;
  oo.lr = 0.1;
  oo.momentum = 0.9;
  cohort_optimizer* opt = NULL;
  CHECK(cohort_optimizer_create(&oo, &opt));
  cohort_trainer* t = NULL;
  CHECK(cohort_trainer_create(g, opt, NULL, &t));
  CHECK(cohort_optimizer_destroy(opt)); /* the trainer keeps its own copy */
  CHECK(cohort_graph_destroy(g));

  float bx[kBatch * kIn];
  int32_t by[kBatch];
  unsigned state = 7;
  float first = 0, last = 0;
  for (int step = 0; step < 200; ++step) {
    make_batch(&state, bx, by);
    cohort_tensor_ref in[2] = {{"x", COHORT_F32, 2, xs, bx, sizeof bx}, {"y", COHORT_I32, 1, ys, by, sizeof by}};
    float l = 0;
    CHECK(cohort_trainer_step(t, in, 2, &l));
    if (step == 0) first = l;
    last = l;
  }
  /* Accuracy on a fresh batch of another size (evaluation re-plans for batch 50). */
  enum { kEval = 50 };
  float ex[kEval * kIn], out[kEval * kClasses];
  int32_t ey[kEval];
  for (int i = 0; i < kEval; i += kBatch) {
    float tx[kBatch * kIn];
    int32_t ty[kBatch];
    make_batch(&state, tx, ty);
    int n = kEval - i < kBatch ? kEval - i : kBatch;
    memcpy(ex + i * kIn, tx, sizeof(float) * (size_t)(n * kIn));
    memcpy(ey + i, ty, sizeof(int32_t) * (size_t)n);
  }
  int64_t exs[2] = {kEval, kIn}, os[2] = {kEval, kClasses};
  cohort_tensor_ref ein = {"x", COHORT_F32, 2, exs, ex, sizeof ex};
  cohort_tensor_ref eout = {"fc2", COHORT_F32, 2, os, out, sizeof out};
  CHECK(cohort_trainer_evaluate(t, &ein, 1, &eout, 1));
  int correct = 0;
  for (int i = 0; i < kEval; ++i) {
    int best = 0;
    for (int k = 1; k < kClasses; ++k) if (out[i * kClasses + k] > out[i * kClasses + best]) best = k;
    correct += best == ey[i];
  }
  CHECK(cohort_trainer_destroy(t));
  printf("loss %.4f -> %.4f, accuracy %d/%d\n", first, last, correct, kEval);
  if (!(last < 0.5f * first) || correct < kEval * 9 / 10) {
    fprintf(stderr, "training did not converge\n");
    return 1;
  }
  return 0;
}
