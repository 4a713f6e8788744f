// Stop requests from the outside: SIGTERM (cluster preemption, scheduler time limits) and SIGINT
// (Ctrl-C). The first signal only sets a flag: the training loop sees it at the next step
// boundary, saves a checkpoint and exits with 128 + the signal number (130 for SIGINT, 143 for
// SIGTERM). A second signal exits at once with that status, saving nothing. `kktrain tokenize`
// installs them unannounced: it stops between documents, removes its shards and says so itself.
#pragma once

namespace kktrain {

// Whether the first signal is announced on stderr (the training run's rank 0), or left to the
// caller to report (kktrain tokenize, and the other ranks).
enum class Announce { yes, no };

class StopSignals {
 public:
  // Installs the handlers; Announce::yes: say so on stderr when the first signal arrives.
  explicit StopSignals(Announce announce);
  ~StopSignals();  // restores the previous ones
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
  // The first signal received, or 0.
  static int received();
  // The training steps are over (the final checkpoint and the export follow): a signal from now
  // on is announced as such, and the run exits 128 + the signal number after what it has
  // started (it saves the final checkpoint; the export only when it had not begun).
  static void set_finishing();
};

}  // namespace kktrain
