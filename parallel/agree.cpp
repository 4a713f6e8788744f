#include "parallel/agree.hpp"

#include <cstdio>
#include <string>

#include "core/log.hpp"

namespace kktrain {

namespace {
double g_failed_wait_s = 60.0;
}  // namespace

void set_failed_rank_wait(double seconds) {
  g_failed_wait_s = seconds;
}

double failed_rank_wait() {
  return g_failed_wait_s;
}

void agree_on_errors(Communicator& comm, std::exception_ptr error) {
  int code = 0;
  std::string msg;
  // An error every rank has already agreed on (a nested agreement): every rank holds it, so
  // every rank rethrows it as it is, without a collective.
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const CollectiveError&) {
      throw;
    } catch (...) {
    }
  }
  if (error) {
    try {
      std::rethrow_exception(error);
    } catch (const Error& e) {
      code = e.exit_code();
      msg = e.what();
    } catch (const std::exception& e) {
      code = 1;
      msg = std::string("internal error: ") + e.what();
    }
  }
  const int first = comm.first_failing_rank(error != nullptr, g_failed_wait_s);
  if (first < 0) {
    // This rank failed and the others did not come to agree within the wait: they are stuck in
    // some other collective (inside a library, waiting for this rank). Say why and end the job.
    std::fprintf(stderr,
                 "kktrain[rank %d]: error: %s (the other ranks did not reach the agreement on "
                 "this failure within %.0f s: aborting the job)\n",
                 comm.rank(), log::one_line(msg).c_str(), g_failed_wait_s);
    std::fflush(stderr);
    comm.abort(code);
  }
  if (first >= comm.size()) return;
  const int status = static_cast<int>(comm.allreduce_max_host(static_cast<double>(code)));
  throw CollectiveError(comm.rank() == first ? msg : std::string(), status);
}

}  // namespace kktrain
