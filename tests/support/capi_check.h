/*
 * For C programs on the C ABI alone (the multirank C tests, the netns benchmarks): CHECK(call)
 * runs a cohort call and, unless it returns COHORT_OK, prints where, the call and
 * cohort_last_error() to stderr and exits with 1.
 */
#ifndef COHORT_TESTS_SUPPORT_CAPI_CHECK_H
#define COHORT_TESTS_SUPPORT_CAPI_CHECK_H

#include <cohort/cohort.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                               \
  do {                                                                                            \
    cohort_status st_ = (call);                                                                   \
    if (st_ != COHORT_OK) {                                                                       \
      fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call, cohort_last_error()); \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

#endif
