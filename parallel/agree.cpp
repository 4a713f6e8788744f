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
  // The lowest failing rank that has something to say speaks (an error agreed on earlier, in a
  // nested step, carries its message on one rank only).
  const int speaker = comm.first_failing_rank(!msg.empty(), g_failed_wait_s);
  const int status = static_cast<int>(comm.allreduce_max_host(static_cast<double>(code)));
  const int who = speaker >= 0 && speaker < comm.size() ? speaker : first;
  throw CollectiveError(comm.rank() == who ? msg : std::string(), status);
}

}  // namespace kktrain
