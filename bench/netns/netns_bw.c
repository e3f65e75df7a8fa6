/*
 * netns_bw: achieved bandwidth through cohort's C ABI (cohort_comm_*), one process per rank,
 * started by netns.sh run (shaped links) or cohort-run (loopback). Rank 0 prints:
 *   p2p: a timed point-to-point transfer rank 0 -> rank 1 (plus a 4-byte ack), MB/s and Mbit/s;
 *   all_reduce: f32 sum over every rank, algorithm and bus bandwidth (nccl-tests: x 2(n-1)/n).
 * Times are medians over --repeats after one warm-up; an all-reduce's time is the slowest rank's.
 * --expect-mbit X makes rank 0 fail (exit 4) unless p2p lies within [min,max] x X and the
 * all-reduce bus bandwidth within [0.5 min, max] x X (or x Y from --expect-allreduce-mbit Y, for
 * uneven links where the slowest rank bounds the ring). --mode failure: every rank runs all-reduces
 * until one fails; some outside agent kills rank --victim (default the last) meanwhile, and every
 * survivor must get COHORT_ERR_PEER_FAILED or TIMEOUT naming it (exit 0), else exit 3.
 * --pairs I-J[=X],..: instead of the above, a timed transfer I -> J (plus the ack) for each pair
 * in turn, one line each (for links that differ per pair, netns.sh --links); =X checks that pair
 * against X Mbit/s like --expect-mbit.
 *   netns_bw [--bytes B] [--repeats R] [--expect-mbit X] [--expect-allreduce-mbit Y]
 *            [--min F] [--max F] [--mode bw|failure] [--victim R] [--timeout-ms T]
 *            [--pairs I-J[=X],..]
 */
#include <cohort/cohort.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tests/support/capi_check.h"

enum { kMaxRepeats = 100, kMaxPairs = 64 };

typedef struct pair {
  int src, dst;
  double expect_mbit; /* 0: no check */
} pair;

typedef struct options {
  size_t bytes;
  int repeats;
  double expect_mbit, expect_ar_mbit, min_frac, max_frac;
  int failure_mode, victim;
  long timeout_ms;
  int npairs;
  pair pairs[kMaxPairs];
} options;

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median(double* v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return v[n / 2];
}

static void usage(void) {
  fprintf(stderr, "usage: netns_bw [--bytes B] [--repeats R] [--expect-mbit X] [--expect-allreduce-mbit Y] "
                  "[--min F] [--max F] "
                  "[--mode bw|failure] [--victim R] [--timeout-ms T] [--pairs I-J[=X],..]\n");
  exit(2);
}

/* "I-J[=X],K-L[=Y],.." into o->pairs; 0 on a malformed list. */
static int parse_pairs(const char* v, options* o) {
  const char* p = v;
  o->npairs = 0;
  while (*p) {
    if (o->npairs == kMaxPairs) return 0;
    pair* q = &o->pairs[o->npairs++];
    char* end;
    q->src = (int)strtol(p, &end, 10);
    if (end == p || *end != '-' || q->src < 0) return 0;
    p = end + 1;
    q->dst = (int)strtol(p, &end, 10);
    if (end == p || q->dst < 0 || q->dst == q->src) return 0;
    p = end;
    q->expect_mbit = 0.0;
    if (*p == '=') {
      q->expect_mbit = strtod(p + 1, &end);
      if (end == p + 1 || q->expect_mbit <= 0.0) return 0;
      p = end;
    }
    if (*p == ',') ++p;
    else if (*p) return 0;
  }
  return o->npairs > 0;
}

static options parse(int argc, char** argv) {
  options o = {4u << 20, 3, 0.0, 0.0, 0.6, 1.1, 0, -1, 60000, 0, {{0, 0, 0.0}}};
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!v) usage();
    if (!strcmp(a, "--bytes")) o.bytes = (size_t)strtoull(v, NULL, 10);
    else if (!strcmp(a, "--repeats")) o.repeats = atoi(v);
    else if (!strcmp(a, "--expect-mbit")) o.expect_mbit = atof(v);
    else if (!strcmp(a, "--expect-allreduce-mbit")) o.expect_ar_mbit = atof(v);
    else if (!strcmp(a, "--min")) o.min_frac = atof(v);
    else if (!strcmp(a, "--max")) o.max_frac = atof(v);
    else if (!strcmp(a, "--mode")) o.failure_mode = !strcmp(v, "failure");
    else if (!strcmp(a, "--victim")) o.victim = atoi(v);
    else if (!strcmp(a, "--timeout-ms")) o.timeout_ms = atol(v);
    else if (!strcmp(a, "--pairs")) {
      if (!parse_pairs(v, &o)) usage();
    } else usage();
    ++i;
  }
  if (o.bytes < 4 || o.repeats < 1 || o.repeats > kMaxRepeats || o.timeout_ms < 1) usage();
  return o;
}

/* Rank src sends `count` floats to rank dst, which answers with 4 bytes; seconds on src (about 0
 * on ranks other than src and dst). */
static double p2p_once(cohort_comm* comm, int rank, int src, int dst, float* buf, size_t count) {
  int32_t ack = 1;
  double t0 = now();
  if (rank == src) {
    CHECK(cohort_comm_send(comm, buf, count, COHORT_F32, dst, NULL));
    CHECK(cohort_comm_recv(comm, &ack, 1, COHORT_I32, dst, NULL));
  } else if (rank == dst) {
    CHECK(cohort_comm_recv(comm, buf, count, COHORT_F32, src, NULL));
    CHECK(cohort_comm_send(comm, &ack, 1, COHORT_I32, src, NULL));
  }
  return now() - t0;
}

/* One all-reduce; the slowest rank's seconds, agreed on by every rank. */
static double all_reduce_once(cohort_comm* comm, float* buf, size_t count) {
  CHECK(cohort_comm_barrier(comm, NULL));
  double t0 = now();
  CHECK(cohort_comm_all_reduce(comm, buf, buf, count, COHORT_F32, COHORT_REDUCE_SUM, NULL));
  int64_t ns = (int64_t)((now() - t0) * 1e9);
  CHECK(cohort_comm_all_reduce(comm, &ns, &ns, 1, COHORT_I64, COHORT_REDUCE_MAX, NULL));
  return (double)ns * 1e-9;
}

static int in_range(const char* what, double mbit, double lo, double hi) {
  int ok = mbit >= lo && mbit <= hi;
  printf("check %s: %.1f Mbit/s in [%.1f, %.1f]: %s\n", what, mbit, lo, hi, ok ? "ok" : "FAILED");
  return ok;
}

/* --pairs: for each pair, a warm-up and then --repeats timed transfers; the sender's times reach
 * rank 0 through an all-reduce (max), which prints and checks. 1 when every check passed. */
static int pairs_mode(cohort_comm* comm, int rank, int size, const options* o, float* buf, size_t count) {
  double times[kMaxRepeats];
  int ok = 1;
  for (int k = 0; k < o->npairs; ++k) {
    const pair* q = &o->pairs[k];
    if (q->src >= size || q->dst >= size) {
      if (rank == 0) fprintf(stderr, "netns_bw: pair %d-%d: only %d ranks\n", q->src, q->dst, (int)size);
      return 0;
    }
    CHECK(cohort_comm_barrier(comm, NULL));
    p2p_once(comm, rank, q->src, q->dst, buf, count); /* warm-up: connects this pair */
    for (int r = 0; r < o->repeats; ++r) {
      CHECK(cohort_comm_barrier(comm, NULL));
      double t = p2p_once(comm, rank, q->src, q->dst, buf, count);
      int64_t ns = rank == q->src ? (int64_t)(t * 1e9) : 0;
      CHECK(cohort_comm_all_reduce(comm, &ns, &ns, 1, COHORT_I64, COHORT_REDUCE_MAX, NULL));
      times[r] = (double)ns * 1e-9;
    }
    if (rank != 0) continue;
    double t = median(times, o->repeats), mbs = (double)(count * 4) / t / 1e6;
    printf("p2p %d->%d: bytes=%zu median_s=%.4f MB/s=%.2f Mbit/s=%.1f\n", q->src, q->dst, count * 4, t, mbs,
           mbs * 8);
    if (q->expect_mbit > 0) {
      char what[48];
      snprintf(what, sizeof what, "p2p %d->%d", q->src, q->dst);
      ok &= in_range(what, mbs * 8, o->min_frac * q->expect_mbit, o->max_frac * q->expect_mbit);
    }
    fflush(stdout);
  }
  return ok;
}

static int failure_mode(cohort_comm* comm, int rank, int size, const options* o, float* buf, size_t count) {
  int victim = o->victim < 0 ? size - 1 : o->victim;
  for (int i = 0; i < o->repeats; ++i) {
    printf("rank %d: all-reduce %d started\n", rank, i);
    fflush(stdout);
    double t0 = now();
    cohort_status st = cohort_comm_all_reduce(comm, buf, buf, count, COHORT_F32, COHORT_REDUCE_SUM, NULL);
    if (st == COHORT_OK) continue;
    char want[32];
    snprintf(want, sizeof want, "rank %d", victim);
    int named = strstr(cohort_last_error(), want) != NULL;
    int32_t failed = -2;
    cohort_status sticky = cohort_comm_status(comm, &failed);
    printf("rank %d: all-reduce %d failed after %.1f s with %s (failed rank %d): %s\n", rank, i, now() - t0,
           cohort_status_name(st), (int)failed, cohort_last_error());
    int ok = (st == COHORT_ERR_PEER_FAILED || st == COHORT_ERR_TIMEOUT) && named && sticky == st;
    printf("rank %d: peer failure %s\n", rank, ok ? "reported as expected" : "NOT as expected");
    cohort_comm_destroy(comm);
    return ok ? 0 : 3;
  }
  printf("rank %d: no failure seen in %d all-reduces\n", rank, o->repeats);
  cohort_comm_destroy(comm);
  return 3;
}

int main(int argc, char** argv) {
  options o = parse(argc, argv);
  cohort_comm_options co = cohort_comm_options_default();
  co.timeout_ms = o.timeout_ms;
  co.connect_timeout_ms = 60000;
  cohort_comm* comm = NULL;
  CHECK(cohort_comm_create_from_env(&co, &comm));
  int32_t rank = -1, size = -1;
  CHECK(cohort_comm_rank(comm, &rank, &size));
  size_t count = o.bytes / 4;
  float* buf = malloc(count * sizeof *buf);
  if (!buf) return 1;
  for (size_t i = 0; i < count; ++i) buf[i] = 1.0f;
  if (o.failure_mode) {
    int rc = failure_mode(comm, rank, size, &o, buf, count);
    free(buf);
    return rc;
  }

  double times[kMaxRepeats];
  int ok = 1;
  const char* rate = getenv("COHORT_NETNS_RATE");
  const char* links = getenv("COHORT_NETNS_LINKS");
  if (rank == 0)
    printf("ranks %d, bytes %zu, repeats %d, link %s%s%s, UCX_TLS=%s\n", (int)size, count * 4, o.repeats,
           rate ? rate : "unshaped (not under netns.sh)", links && *links ? ", pairs " : "",
           links && *links ? links : "", getenv("UCX_TLS") ? getenv("UCX_TLS") : "(default)");
  if (o.npairs > 0) {
    ok = pairs_mode(comm, rank, size, &o, buf, count);
    CHECK(cohort_comm_barrier(comm, NULL));
    CHECK(cohort_comm_destroy(comm));
    free(buf);
    fflush(stdout);
    return ok ? 0 : 4;
  }
  if (size >= 2) {
    p2p_once(comm, rank, 0, 1, buf, count); /* warm-up: connects the endpoints */
    for (int r = 0; r < o.repeats; ++r) {
      CHECK(cohort_comm_barrier(comm, NULL));
      times[r] = p2p_once(comm, rank, 0, 1, buf, count);
    }
    if (rank == 0) {
      double t = median(times, o.repeats), mbs = (double)(count * 4) / t / 1e6;
      printf("p2p: bytes=%zu median_s=%.4f MB/s=%.2f Mbit/s=%.1f\n", count * 4, t, mbs, mbs * 8);
      if (o.expect_mbit > 0)
        ok &= in_range("p2p", mbs * 8, o.min_frac * o.expect_mbit, o.max_frac * o.expect_mbit);
    }
  }
  all_reduce_once(comm, buf, count); /* warm-up */
  for (int r = 0; r < o.repeats; ++r) times[r] = all_reduce_once(comm, buf, count);
  if (rank == 0) {
    double t = median(times, o.repeats), alg = (double)(count * 4) / t / 1e6;
    double bus = size > 1 ? alg * 2.0 * (size - 1) / size : alg;
    printf("all_reduce: ranks=%d bytes=%zu median_s=%.4f algbw_MB/s=%.2f busbw_MB/s=%.2f busbw_Mbit/s=%.1f\n",
           (int)size, count * 4, t, alg, bus, bus * 8);
    double want = o.expect_ar_mbit > 0 ? o.expect_ar_mbit : o.expect_mbit;
    if (want > 0 && size > 1)
      ok &= in_range("all_reduce busbw", bus * 8, 0.5 * o.min_frac * want, o.max_frac * want);
  }
  CHECK(cohort_comm_barrier(comm, NULL));
  CHECK(cohort_comm_destroy(comm));
  free(buf);
  fflush(stdout);
  return ok ? 0 : 4;
}
