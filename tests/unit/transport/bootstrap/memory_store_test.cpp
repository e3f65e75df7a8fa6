// MemoryStore: set/get/add semantics, waiting across threads, deadlines and limits.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "core/base/error.h"
#include "transport/bootstrap/store.h"

namespace cohort::transport {
namespace {

using namespace std::chrono_literals;

Bytes bytes_of(const std::string& s) { return Bytes(s.begin(), s.end()); }

TEST(MemoryStore, SetThenGet) {
  auto store = make_memory_store();
  store->set("a", bytes_of("one"));
  EXPECT_EQ(store->get("a", 0ms), bytes_of("one"));
  store->set("a", bytes_of("two"));  // overwrite
  EXPECT_EQ(store->get("a", 0ms), bytes_of("two"));
  store->set("empty", {});
  EXPECT_TRUE(store->get("empty", 0ms).empty());
}

TEST(MemoryStore, GetWaitsForAnotherThread) {
  auto store = make_memory_store();
  std::thread writer([&] { store->set("late", bytes_of("here")); });
  EXPECT_EQ(store->get("late", 10s), bytes_of("here"));
  writer.join();
}

TEST(MemoryStore, GetTimesOutNamingTheKey) {
  auto store = make_memory_store();
  auto start = std::chrono::steady_clock::now();
  try {
    store->get("never/set", 50ms);
    FAIL() << "get returned";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kTimeout);
    EXPECT_NE(std::string(e.what()).find("'never/set'"), std::string::npos) << e.what();
  }
  EXPECT_GE(std::chrono::steady_clock::now() - start, 50ms);
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

TEST(MemoryStore, AddCountsAcrossThreads) {
  auto store = make_memory_store();
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 100; ++i) store->add("count", 1);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("count", 0), 400);
  EXPECT_EQ(store->get("count", 0ms), bytes_of("400"));  // counters read as decimal text
  EXPECT_EQ(store->add("count", -401), -1);
}

TEST(MemoryStore, AddWakesAWaitingGet) {
  auto store = make_memory_store();
  std::thread adder([&] { store->add("barrier", 1); });
  EXPECT_EQ(store->get("barrier", 10s), bytes_of("1"));
  adder.join();
}

TEST(MemoryStore, RejectsBadKeysValuesAndCounters) {
  auto store = make_memory_store();
  EXPECT_THROW(store->set("", {}), Error);
  EXPECT_THROW(store->set(std::string(1025, 'k'), {}), Error);
  store->set("text", bytes_of("abc"));
  try {
    store->add("text", 1);
    FAIL() << "add on text succeeded";
  } catch (const Error& e) {
    EXPECT_EQ(e.status(), Status::kInvalidArgument);
    EXPECT_NE(std::string(e.what()).find("'text'"), std::string::npos);
  }
  EXPECT_EQ(store->get("text", 0ms), bytes_of("abc"));  // unchanged after the failed add
}

}  // namespace
}  // namespace cohort::transport
