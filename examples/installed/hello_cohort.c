/* Builds a one-operator graph with the installed library and prints what it knows. */
#include <cohort/cohort.h>
#include <stdio.h>

int main(void) {
  cohort_graph* g = NULL;
  int64_t shape[2] = {2, 3};
  int32_t x = -1, y = -1;
  if (cohort_graph_create(&g) != COHORT_OK || cohort_graph_add_input(g, "x", COHORT_F32, shape, 2, &x) != COHORT_OK ||
      cohort_graph_add_op(g, "relu", "act", &x, 1, NULL, &y, 1, NULL) != COHORT_OK) {
    fprintf(stderr, "error: %s\n", cohort_last_error());
    return 1;
  }
  int32_t nodes = 0;
  cohort_graph_stats(g, NULL, &nodes, NULL, NULL);
  printf("cohort %s (ABI %d): graph with %d node(s)\n", cohort_version_string(), cohort_abi_version(), nodes);
  cohort_graph_destroy(g);
  return cohort_abi_version() / 10000 == COHORT_ABI_VERSION / 10000 ? 0 : 1;
}
