// Every entry point that takes a handle rejects NULL with INVALID_HANDLE and a message naming
// the function and the argument, and every destroy accepts NULL.
#include <gtest/gtest.h>

#include <cohort/cohort.h>

#include <functional>
#include <thread>
#include <string>
#include <vector>

namespace {

struct Case {
  const char* function;
  const char* argument;
  std::function<cohort_status()> call;
};

TEST(CapiNullHandles, EveryEntryPoint) {
  int64_t shape[1] = {1};
  int32_t id = 0;
  float f = 0;
  cohort_tensor_ref ref = {"x", COHORT_F32, 1, shape, &f, sizeof f};
  cohort_trainer_stats stats{};
  stats.size = sizeof stats;
  cohort_plan_options plan_options = cohort_plan_options_default(), chosen = cohort_plan_options_default();
  const std::vector<Case> cases = {
      {"cohort_attrs_set_int", "attrs", [&] { return cohort_attrs_set_int(nullptr, "a", 1); }},
      {"cohort_attrs_set_float", "attrs", [&] { return cohort_attrs_set_float(nullptr, "a", 1); }},
      {"cohort_attrs_set_string", "attrs", [&] { return cohort_attrs_set_string(nullptr, "a", "b"); }},
      {"cohort_attrs_set_ints", "attrs", [&] { return cohort_attrs_set_ints(nullptr, "a", shape, 1); }},
      {"cohort_attrs_set_floats", "attrs", [&] { return cohort_attrs_set_floats(nullptr, "a", nullptr, 0); }},
      {"cohort_graph_add_input", "graph", [&] { return cohort_graph_add_input(nullptr, "x", COHORT_F32, shape, 1, &id); }},
      {"cohort_graph_add_parameter", "graph",
       [&] { return cohort_graph_add_parameter(nullptr, "p", COHORT_F32, shape, 1, nullptr, &id); }},
      {"cohort_graph_add_op", "graph",
       [&] { return cohort_graph_add_op(nullptr, "relu", "r", &id, 1, nullptr, &id, 1, nullptr); }},
      {"cohort_graph_mark_output", "graph", [&] { return cohort_graph_mark_output(nullptr, 0); }},
      {"cohort_graph_set_loss", "graph", [&] { return cohort_graph_set_loss(nullptr, 0); }},
      {"cohort_graph_find", "graph", [&] { return cohort_graph_find(nullptr, "x", &id); }},
      {"cohort_graph_value_shape", "graph",
       [&] { return cohort_graph_value_shape(nullptr, 0, nullptr, 0, nullptr, nullptr); }},
      {"cohort_graph_stats", "graph", [&] { return cohort_graph_stats(nullptr, nullptr, nullptr, nullptr, nullptr); }},
      {"cohort_graph_save", "graph", [&] { return cohort_graph_save(nullptr, "/tmp/x"); }},
      {"cohort_trainer_step", "trainer", [&] { return cohort_trainer_step(nullptr, &ref, 1, &f); }},
      {"cohort_trainer_evaluate", "trainer", [&] { return cohort_trainer_evaluate(nullptr, &ref, 1, &ref, 1); }},
      {"cohort_trainer_get_parameter", "trainer", [&] { return cohort_trainer_get_parameter(nullptr, &ref); }},
      {"cohort_trainer_set_parameter", "trainer", [&] { return cohort_trainer_set_parameter(nullptr, &ref); }},
      {"cohort_trainer_gather_parameters", "trainer", [] { return cohort_trainer_gather_parameters(nullptr); }},
      {"cohort_trainer_average_replicas", "trainer", [] { return cohort_trainer_average_replicas(nullptr, nullptr); }},
      {"cohort_trainer_get_stats", "trainer", [&] { return cohort_trainer_get_stats(nullptr, &stats); }},
      {"cohort_trainer_pipeline_stages", "trainer",
       [&] { return cohort_trainer_pipeline_stages(nullptr, nullptr, 0, nullptr); }},
      {"cohort_plan_choose", "global_graph",
       [&] { return cohort_plan_choose(&plan_options, nullptr, nullptr, nullptr, nullptr, &chosen, nullptr, 0, nullptr); }},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(c.call(), COHORT_ERR_INVALID_HANDLE) << c.function;
    std::string want = std::string(c.function) + ": " + c.argument + " is NULL";
    EXPECT_EQ(std::string(cohort_last_error()), want) << c.function;
  }
  EXPECT_EQ(cohort_attrs_destroy(nullptr), COHORT_OK);
  EXPECT_EQ(cohort_graph_destroy(nullptr), COHORT_OK);
  EXPECT_EQ(cohort_optimizer_destroy(nullptr), COHORT_OK);
  EXPECT_EQ(cohort_trainer_destroy(nullptr), COHORT_OK);
}

TEST(CapiNullHandles, LastErrorIsPerThread) {
  EXPECT_EQ(cohort_graph_mark_output(nullptr, 0), COHORT_ERR_INVALID_HANDLE);
  std::string other;
  std::thread([&] { other = cohort_last_error(); }).join();
  EXPECT_EQ(other, "");
  EXPECT_NE(std::string(cohort_last_error()), "");
}

}  // namespace
