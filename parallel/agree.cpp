#include "parallel/agree.hpp"

#include <string>

namespace kktrain {

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
  // Lowest failing rank: the maximum of -rank over failing ranks (others offer -size).
  const int first = -static_cast<int>(
      comm.allreduce_max_host(error ? -static_cast<double>(comm.rank()) : -double(comm.size())));
  if (first >= comm.size()) return;
  const int status = static_cast<int>(comm.allreduce_max_host(static_cast<double>(code)));
  throw CollectiveError(comm.rank() == first ? msg : std::string(), status);
}

}  // namespace kktrain
