// Collective error agreement: a step every rank runs (opening its data, writing its part of a
// file) either succeeds everywhere or fails everywhere with one message, instead of leaving the
// ranks that succeeded waiting forever in the next collective for the one that failed.
#pragma once

#include <exception>
#include <optional>
#include <type_traits>
#include <utility>

#include "core/errors.hpp"
#include "parallel/communicator.hpp"

namespace kktrain {

// Called by every rank with its own outcome (null: success). When any rank failed, throws on
// every rank: the lowest failing rank rethrows its error as a CollectiveError carrying the
// message, the others a CollectiveError without one; the exit status is the largest failing
// one. Returns normally only when every rank succeeded.
//
// The last resort: a failing rank waits at most failed_rank_wait() seconds for the others to
// arrive. When they do not (they are blocked in a collective this rank will never join, e.g.
// inside a library), it prints its message and aborts the job (Communicator::abort), so one
// rank's failure never leaves the job hanging.
void agree_on_errors(Communicator& comm, std::exception_ptr error);

// The wait above, in seconds (default 60; distributed.failed_rank_wait_s).
void set_failed_rank_wait(double seconds);
double failed_rank_wait();

// Runs f() on every rank and agrees on its outcome (above); returns f's result.
template <class F>
auto collectively(Communicator& comm, F&& f) {
  using R = std::invoke_result_t<F>;
  std::exception_ptr error;
  if constexpr (std::is_void_v<R>) {
    try {
      f();
    } catch (...) {
      error = std::current_exception();
    }
    agree_on_errors(comm, error);
  } else {
    std::optional<R> result;
    try {
      result.emplace(f());
    } catch (...) {
      error = std::current_exception();
    }
    agree_on_errors(comm, error);
    return std::move(*result);
  }
}

}  // namespace kktrain
