/*
 * Collectives through the C ABI alone, one process per rank under cohort-run. Every rank checks
 * its results against values it computes itself. With the argument "kill", the last rank leaves
 * after the first barrier and every other rank must see its next all-reduce fail with
 * COHORT_ERR_PEER_FAILED (or TIMEOUT) naming that rank, within the communicator's timeout.
 */
#include <cohort/cohort.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "tests/support/capi_check.h"

#define EXPECT(cond)                                                             \
  do {                                                                           \
    if (!(cond)) {                                                               \
      fprintf(stderr, "%s:%d: expectation failed: %s\n", __FILE__, __LINE__, #cond); \
      exit(1);                                                                   \
    }                                                                            \
  } while (0)

enum { kCount = 1001 }; /* odd, not divisible by the world size */

static void check_collectives(cohort_comm* comm, int rank, int size) {
  static float a[kCount], b[kCount * 8], c[kCount * 8];
  for (int i = 0; i < kCount; ++i) a[i] = (float)(rank + 1) * (float)(i % 7);
  /* Asynchronous all-reduce: poll a bounded number of times, then wait. */
  cohort_work* w = NULL;
  CHECK(cohort_comm_all_reduce(comm, a, b, kCount, COHORT_F32, COHORT_REDUCE_SUM, &w));
  int32_t done = 0;
  for (int spin = 0; spin < 1000 && !done; ++spin) CHECK(cohort_work_test(w, &done));
  CHECK(cohort_work_wait(w, 30000));
  CHECK(cohort_work_destroy(w));
  float ranks_sum = (float)size * (float)(size + 1) / 2.0f;
  for (int i = 0; i < kCount; ++i) EXPECT(b[i] == ranks_sum * (float)(i % 7));

  CHECK(cohort_comm_all_gather(comm, a, c, kCount, COHORT_F32, NULL));
  for (int r = 0; r < size; ++r) EXPECT(c[r * kCount + 5] == (float)(r + 1) * 5.0f);

  for (int i = 0; i < kCount * size; ++i) c[i] = (float)(rank + i);
  CHECK(cohort_comm_reduce_scatter(comm, c, b, kCount, COHORT_F32, COHORT_REDUCE_MAX, NULL));
  EXPECT(b[3] == (float)(size - 1 + rank * kCount + 3));

  /* In memory from cohort_comm_mem_alloc, which every rank maps where they share a host. */
  float* m = NULL;
  CHECK(cohort_comm_mem_alloc(comm, sizeof(float) * kCount, (void**)&m));
  for (int i = 0; i < kCount; ++i) m[i] = a[i];
  CHECK(cohort_comm_all_reduce(comm, m, m, kCount, COHORT_F32, COHORT_REDUCE_SUM, NULL));
  for (int i = 0; i < kCount; ++i) EXPECT(m[i] == ranks_sum * (float)(i % 7));
  CHECK(cohort_comm_mem_free(comm, m));

  int32_t token = rank == 0 ? 4242 : 0;
  CHECK(cohort_comm_broadcast(comm, &token, 1, COHORT_I32, 0, NULL));
  EXPECT(token == 4242);

  /* A ring of send/recv: receive from the left, send to the right (needs a peer). */
  if (size < 2) return;
  int32_t out = rank, in = -1;
  cohort_work* rw = NULL;
  CHECK(cohort_comm_recv(comm, &in, 1, COHORT_I32, (rank + size - 1) % size, &rw));
  CHECK(cohort_comm_send(comm, &out, 1, COHORT_I32, (rank + 1) % size, NULL));
  CHECK(cohort_work_wait(rw, -1));
  CHECK(cohort_work_destroy(rw));
  EXPECT(in == (rank + size - 1) % size);

  /* Even and odd ranks form two communicators. */
  cohort_comm* half = NULL;
  CHECK(cohort_comm_split(comm, rank % 2, rank, &half));
  int32_t hr = -1, hs = -1;
  CHECK(cohort_comm_rank(half, &hr, &hs));
  EXPECT(hs == (size + 1 - rank % 2) / 2 && hr == rank / 2);
  int32_t one = 1, total = 0;
  CHECK(cohort_comm_all_reduce(half, &one, &total, 1, COHORT_I32, COHORT_REDUCE_SUM, NULL));
  EXPECT(total == hs);
  CHECK(cohort_comm_destroy(half));
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

int main(int argc, char** argv) {
  int kill_last = argc > 1 && strcmp(argv[1], "kill") == 0;
  cohort_comm_options o = cohort_comm_options_default();
  o.timeout_ms = 5000;
  o.connect_timeout_ms = 30000;
  cohort_comm* comm = NULL;
  CHECK(cohort_comm_create_from_env(&o, &comm));
  int32_t rank = -1, size = -1;
  CHECK(cohort_comm_rank(comm, &rank, &size));
  if (!kill_last) {
    check_collectives(comm, rank, size);
    CHECK(cohort_comm_barrier(comm, NULL));
    CHECK(cohort_comm_destroy(comm));
    printf("rank %d of %d: collectives ok\n", rank, size);
    return 0;
  }
  /* The last rank leaves only once every other rank has told it that it is ready, so nobody can
   * be caught mid-barrier: the failure must surface in the all-reduce below. */
  int32_t ready = 1;
  if (rank == size - 1) {
    for (int r = 0; r < size - 1; ++r) CHECK(cohort_comm_recv(comm, &ready, 1, COHORT_I32, r, NULL));
    _exit(0); /* leaves without a word */
  }
  /* The ready message may itself be caught by the departure (its completion races the exit):
   * either way the first failing call must name the departed rank. */
  static float buf[1 << 16];
  double start = now();
  cohort_status st = cohort_comm_send(comm, &ready, 1, COHORT_I32, size - 1, NULL);
  if (st == COHORT_OK) st = cohort_comm_all_reduce(comm, buf, buf, 1 << 16, COHORT_F32, COHORT_REDUCE_SUM, NULL);
  double took = now() - start;
  char want[32];
  snprintf(want, sizeof want, "rank %d", size - 1);
  if ((st != COHORT_ERR_PEER_FAILED && st != COHORT_ERR_TIMEOUT) || !strstr(cohort_last_error(), want) || took > 20.0) {
    fprintf(stderr, "rank %d: expected a failure naming %s within 20 s, got status %d after %.1f s: %s\n", rank, want,
            (int)st, took, cohort_last_error());
    return 1;
  }
  printf("rank %d: peer failure reported after %.1f s: %s\n", rank, took, cohort_last_error());
  int32_t failed = -2;
  EXPECT(cohort_comm_status(comm, &failed) == st);
  EXPECT(cohort_comm_all_reduce(comm, buf, buf, 1, COHORT_F32, COHORT_REDUCE_SUM, NULL) == st); /* sticky */
  CHECK(cohort_comm_destroy(comm));
  return 0;
}
