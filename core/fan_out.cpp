// Items on worker threads, the first error rethrown (core/fan_out.hpp).
#include "core/fan_out.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace kktrain {

void fan_out(std::size_t items, int workers,
             const std::function<void(int worker, std::size_t item)>& work,
             const FanOutHooks& hooks) {
  if (items == 0) return;
  const int n = static_cast<int>(std::min<std::size_t>(std::max(workers, 1), items));
  std::vector<std::exception_ptr> errors(items);  // by item
  std::exception_ptr hook_error;                  // from stop or tick (guarded by m)
  std::atomic<std::size_t> next{0};
  std::atomic<bool> halted{false};  // hand out no more items
  std::mutex m;
  std::condition_variable done;
  const bool ticking = static_cast<bool>(hooks.tick);
  int running = 0;  // worker threads not finished (guarded by m)

  auto hook_failed = [&] {
    std::lock_guard<std::mutex> lock(m);
    if (!hook_error) hook_error = std::current_exception();
    halted = true;
  };
  auto run = [&](int w) {
    while (!halted) {
      try {
        if (hooks.stop && hooks.stop()) {
          halted = true;
          break;
        }
      } catch (...) {
        hook_failed();
        break;
      }
      const std::size_t i = next++;
      if (i >= items) break;
      try {
        work(w, i);
      } catch (...) {
        errors[i] = std::current_exception();
        halted = true;
      }
    }
  };
  auto thread_main = [&](int w) {
    run(w);
    std::lock_guard<std::mutex> lock(m);
    --running;
    done.notify_one();
  };

  std::vector<std::thread> pool;
  const int first_thread = ticking ? 0 : 1;  // without a tick, worker 0 is the calling thread
  try {
    for (int w = first_thread; w < n; ++w) {
      {
        std::lock_guard<std::mutex> lock(m);
        ++running;
      }
      try {
        pool.emplace_back(thread_main, w);
      } catch (...) {
        std::lock_guard<std::mutex> lock(m);
        --running;
        throw;
      }
    }
  } catch (...) {  // a thread could not start: the started ones stop, then the reason
    halted = true;
    for (auto& t : pool) t.join();
    throw;
  }
  if (ticking) {
    bool tick_failed = false;
    std::unique_lock<std::mutex> lock(m);
    while (!done.wait_for(lock, hooks.tick_period, [&] { return running == 0; })) {
      if (tick_failed) continue;
      lock.unlock();
      try {
        hooks.tick();
      } catch (...) {
        tick_failed = true;
        hook_failed();
      }
      lock.lock();
    }
  } else {
    run(0);
  }
  for (auto& t : pool) t.join();
  for (const auto& e : errors) {
    if (e) std::rethrow_exception(e);
  }
  if (hook_error) std::rethrow_exception(hook_error);
}

}  // namespace kktrain
