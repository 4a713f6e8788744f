#include "apps/train/signals.hpp"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace kktrain {

namespace {

std::atomic<int> g_first{0};
std::atomic<bool> g_finishing{false};
bool g_announce = false;
struct sigaction g_old_int, g_old_term;

void on_signal(int sig) {
  int expected = 0;
  if (!g_first.compare_exchange_strong(expected, sig)) _exit(128 + expected);  // the second one
  static const char during[] =
      "kktrain: stop requested: saving a checkpoint at the end of this step (signal again to "
      "exit at once)\n";
  static const char after[] =
      "kktrain: stop requested after the last step: finishing the final checkpoint, skipping "
      "the export if it has not started (signal again to exit at once)\n";
  if (!g_announce) return;
  const bool late = g_finishing.load();
  const ssize_t ignored =
      write(STDERR_FILENO, late ? after : during, (late ? sizeof(after) : sizeof(during)) - 1);
  (void)ignored;
}

}  // namespace

StopSignals::StopSignals(Announce announce) {
  g_announce = announce == Announce::yes;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
}

void StopSignals::set_finishing() {
  g_finishing.store(true);
}

int StopSignals::received() {
  return g_first.load();
}

}  // namespace kktrain
