// One batch of independent items run on worker threads, the first error rethrown.
//
// fan_out(items, workers, work) runs work(worker, i) for every i in [0, items) on at most
// `workers` threads (never more than items; at least one):
//   - items are handed out one at a time in increasing order to whichever worker is free, and
//     `worker` (in [0, workers)) names the thread running it, so per-worker state (an encoder, a
//     scratch buffer) is indexed by it; results written to out[i] come out in item order whatever
//     the thread count;
//   - when work throws, no more items are handed out (those already running finish); once every
//     worker has stopped, the error of the lowest item that failed is rethrown. Items are handed
//     out in order, so every item below a failed one ran: the error is the same as a serial run's
//     first, for any thread count;
//   - FanOutHooks::stop, when set, is asked before each item is handed out: true hands out no
//     more (fan_out then returns normally; the caller knows that the batch is incomplete);
//   - FanOutHooks::tick, when set, runs on the calling thread every tick_period until every worker
//     has stopped (a progress line); the calling thread then runs no item. Without a tick the
//     calling thread is worker 0. An exception from tick stops the hand-out too and is rethrown
//     after the items' (which come first).
// `stop` runs on the worker threads, concurrently: it must be thread-safe. Neither it nor a
// thrown exception leaves a thread running: fan_out returns or throws only after joining all.
// Users: apps/dataprep/tokenize_shards.cpp (documents through encoders), text/encoder.cpp (a
// long segment's pieces over the encoder's helper states), example_cache.cpp
// (chat examples rendered).
#pragma once

#include <chrono>
#include <cstddef>
#include <functional>

namespace kktrain {

struct FanOutHooks {
  std::function<bool()> stop;  // true: hand out no more items
  std::function<void()> tick;  // on the calling thread, every tick_period, while workers run
  std::chrono::milliseconds tick_period{500};
};

void fan_out(std::size_t items, int workers,
             const std::function<void(int worker, std::size_t item)>& work,
             const FanOutHooks& hooks = {});

}  // namespace kktrain
