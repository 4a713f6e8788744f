// core/fan_out.hpp: results in item order, the lowest failed item's error rethrown after every
// worker stopped, no item handed out after an error or a stop, the tick on the calling thread.
#include "core/fan_out.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace kktrain {
namespace {

TEST(FanOut, EveryItemOnceInItemOrderForAnyWorkerCount) {
  for (int workers : {1, 2, 3, 8, 100}) {
    std::vector<int> out(37, -1);
    std::vector<std::atomic<int>> runs(37);
    fan_out(out.size(), workers, [&](int, std::size_t i) {
      out[i] = static_cast<int>(i * i);
      ++runs[i];
    });
    for (std::size_t i = 0; i < out.size(); ++i) {
      EXPECT_EQ(out[i], static_cast<int>(i * i)) << workers;
      EXPECT_EQ(runs[i].load(), 1) << workers;
    }
  }
}

TEST(FanOut, NoItemsRunsNothing) {
  bool ran = false;
  FanOutHooks hooks;
  hooks.tick = [&] { ran = true; };
  fan_out(
      0, 4, [&](int, std::size_t) { ran = true; }, hooks);
  EXPECT_FALSE(ran);
}

TEST(FanOut, WorkerIndexesAreDistinctAndBounded) {
  // Per-worker state indexed by `worker` is never shared by two threads at once.
  for (bool ticking : {false, true}) {
    std::vector<std::atomic<int>> busy(3);
    std::atomic<bool> shared{false}, out_of_range{false};
    FanOutHooks hooks;
    if (ticking) hooks.tick = [] {};
    fan_out(
        200, 3,
        [&](int w, std::size_t) {
          if (w < 0 || w >= 3) {
            out_of_range = true;
            return;
          }
          if (++busy[w] != 1) shared = true;
          std::this_thread::yield();
          --busy[w];
        },
        hooks);
    EXPECT_FALSE(shared);
    EXPECT_FALSE(out_of_range);
  }
}

TEST(FanOut, WithoutTickTheCallingThreadIsWorkerZero) {
  const auto caller = std::this_thread::get_id();
  std::mutex m;
  std::set<std::thread::id> zero;
  fan_out(50, 4, [&](int w, std::size_t) {
    if (w != 0) return;
    std::lock_guard<std::mutex> lock(m);
    zero.insert(std::this_thread::get_id());
  });
  for (const auto& id : zero) EXPECT_EQ(id, caller);
}

TEST(FanOut, LowestFailedItemRethrownAfterAllStop) {
  // Items 5 and 20 fail; item 5's error comes back whatever the thread count, and no worker is
  // still running when fan_out throws.
  for (int workers : {1, 2, 4, 16}) {
    std::atomic<int> running{0};
    try {
      fan_out(64, workers, [&](int, std::size_t i) {
        ++running;
        std::this_thread::sleep_for(std::chrono::microseconds(200));
        --running;
        if (i == 5 || i == 20) throw std::runtime_error("item " + std::to_string(i));
      });
      FAIL() << "no error rethrown";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "item 5") << workers;
    }
    EXPECT_EQ(running.load(), 0);
  }
}

TEST(FanOut, NoItemHandedOutAfterAnError) {
  // One worker: after item 3 fails nothing else starts.
  std::vector<std::size_t> ran;
  EXPECT_THROW(fan_out(10, 1,
                       [&](int, std::size_t i) {
                         ran.push_back(i);
                         if (i == 3) throw std::logic_error("x");
                       }),
               std::logic_error);
  EXPECT_EQ(ran, (std::vector<std::size_t>{0, 1, 2, 3}));
}

TEST(FanOut, StopHandsOutNoMoreAndReturns) {
  std::atomic<int> ran{0};
  FanOutHooks hooks;
  hooks.stop = [&] { return ran.load() >= 5; };
  fan_out(
      1000, 1, [&](int, std::size_t) { ++ran; }, hooks);
  EXPECT_EQ(ran.load(), 5);
  ran = 0;
  fan_out(
      1000, 4, [&](int, std::size_t) { ++ran; }, hooks);
  EXPECT_LT(ran.load(), 1000);
  EXPECT_GE(ran.load(), 5);
}

TEST(FanOut, TickRunsOnTheCallingThreadWhileWorkersRun) {
  const auto caller = std::this_thread::get_id();
  std::atomic<int> ticks{0};
  std::atomic<bool> elsewhere{false}, item_on_caller{false};
  FanOutHooks hooks;
  hooks.tick_period = std::chrono::milliseconds(1);
  hooks.tick = [&] {
    if (std::this_thread::get_id() != caller) elsewhere = true;
    ++ticks;
  };
  fan_out(
      4, 2,
      [&](int, std::size_t) {
        if (std::this_thread::get_id() == caller) item_on_caller = true;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      },
      hooks);
  EXPECT_GT(ticks.load(), 0);
  EXPECT_FALSE(elsewhere);
  EXPECT_FALSE(item_on_caller);
}

TEST(FanOut, TickErrorStopsTheHandOutAndComesAfterItemErrors) {
  FanOutHooks hooks;
  hooks.tick_period = std::chrono::milliseconds(1);
  hooks.tick = [] { throw std::runtime_error("tick"); };
  std::atomic<int> ran{0};
  try {
    fan_out(
        100000, 2,
        [&](int, std::size_t) {
          ++ran;
          std::this_thread::sleep_for(std::chrono::microseconds(100));
        },
        hooks);
    FAIL() << "no error rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "tick");
  }
  EXPECT_LT(ran.load(), 100000);
  // An item that failed while the tick threw: the item's error.
  std::atomic<bool> started{false};
  hooks.tick = [&] {
    while (!started) std::this_thread::yield();
    throw std::runtime_error("tick");
  };
  try {
    fan_out(
        1, 1,
        [&](int, std::size_t) {
          started = true;
          std::this_thread::sleep_for(std::chrono::milliseconds(20));
          throw std::runtime_error("item");
        },
        hooks);
    FAIL() << "no error rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "item");
  }
}

}  // namespace
}  // namespace kktrain
