// MemoryStore: the Store for threads of one process (tests, single-process simulation of many
// ranks). One mutex guards the map; get() waits on a condition variable up to its deadline.
#include <condition_variable>
#include <map>
#include <mutex>

#include "core/base/error.h"
#include "transport/bootstrap/store.h"
#include "transport/bootstrap/store_util.h"

namespace cohort::transport {
namespace {

class MemoryStore final : public Store {
 public:
  void set(const std::string& key, const Bytes& value) override {
    detail::check_key("MemoryStore::set", key);
    detail::check_value("MemoryStore::set", key, value.size());
    {
      std::lock_guard<std::mutex> lock(mu_);
      values_[key] = value;
    }
    changed_.notify_all();
  }

  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override {
    detail::check_key("MemoryStore::get", key);
    auto wait = detail::clamp_wait(timeout);
    auto deadline = Clock::now() + wait;
    std::unique_lock<std::mutex> lock(mu_);
    bool found = changed_.wait_until(lock, deadline, [&] { return values_.count(key) > 0; });
    COHORT_CHECK(found, Status::kTimeout, "MemoryStore::get: key '", key, "' was not set within ",
                 wait.count(), " ms");
    return values_[key];
  }

  int64_t add(const std::string& key, int64_t delta) override {
    detail::check_key("MemoryStore::add", key);
    int64_t result = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      Bytes slot;
      auto it = values_.find(key);
      if (it != values_.end()) slot = it->second;
      result = detail::add_to_counter(key, slot, delta);  // throws before anything changes
      values_[key] = std::move(slot);
    }
    changed_.notify_all();
    return result;
  }

 private:
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, Bytes> values_;
};

}  // namespace

std::shared_ptr<Store> make_memory_store() { return std::make_shared<MemoryStore>(); }

}  // namespace cohort::transport
