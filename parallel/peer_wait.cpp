// Bounded, low-CPU waits for other ranks (parallel/peer_wait.hpp).
#include "parallel/peer_wait.hpp"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "core/strings.hpp"

namespace kktrain {

namespace {

double g_stuck_wait_s = 300.0;
std::vector<int> g_pids, g_nodes;       // every world rank's process id and node (its lowest rank)
MPI_Comm g_live = MPI_COMM_NULL;        // "do you answer" messages
constexpr int kPing = 1, kPong = 2;     // tags on g_live
constexpr int kSpinTests = 64;          // tests between clock reads while spinning
constexpr double kSpinSeconds = 0.002;  // spinning before the first sleep
constexpr int kFirstSleepUs = 50, kMaxSleepUs = 1000;

// Answers every "do you answer" message that has arrived.
void answer_pings() {
  for (;;) {
    int flag = 0;
    MPI_Status st;
    MPI_Iprobe(MPI_ANY_SOURCE, kPing, g_live, &flag, &st);
    if (!flag) return;
    MPI_Recv(nullptr, 0, MPI_BYTE, st.MPI_SOURCE, kPing, g_live, MPI_STATUS_IGNORE);
    MPI_Request r;
    MPI_Isend(nullptr, 0, MPI_BYTE, st.MPI_SOURCE, kPong, g_live, &r);
    MPI_Request_free(&r);
  }
}

// Asks every other rank whether it answers and collects answers for `grace` seconds (or until
// every rank answered, or the requests completed: then returns an empty list). The ranks that
// did not answer, in order; *speaker: the lowest rank that did (this one included).
std::vector<int> silent_ranks(int n, MPI_Request* requests, double grace, int* speaker,
                              bool* completed) {
  int me = 0, world = 1;
  MPI_Comm_rank(g_live, &me);
  MPI_Comm_size(g_live, &world);
  std::vector<char> answered(static_cast<std::size_t>(world), 0);
  answered[static_cast<std::size_t>(me)] = 1;
  for (int r = 0; r < world; ++r) {
    if (r == me) continue;
    MPI_Request q;
    MPI_Isend(nullptr, 0, MPI_BYTE, r, kPing, g_live, &q);
    MPI_Request_free(&q);
  }
  const double t0 = now_s();
  int count = 1;
  while (count < world && now_s() - t0 < grace) {
    answer_pings();
    for (;;) {
      int flag = 0;
      MPI_Status st;
      MPI_Iprobe(MPI_ANY_SOURCE, kPong, g_live, &flag, &st);
      if (!flag) break;
      MPI_Recv(nullptr, 0, MPI_BYTE, st.MPI_SOURCE, kPong, g_live, MPI_STATUS_IGNORE);
      char& a = answered[static_cast<std::size_t>(st.MPI_SOURCE)];
      count += a ? 0 : 1;
      a = 1;
    }
    int done = 0;
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) {
      *completed = true;
      return {};
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::vector<int> silent;
  *speaker = me;
  for (int r = world - 1; r >= 0; --r) {
    if (answered[static_cast<std::size_t>(r)]) *speaker = r;
  }
  for (int r = 0; r < world; ++r) {
    if (!answered[static_cast<std::size_t>(r)]) silent.push_back(r);
  }
  return silent;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s = ranks.size() == 1 ? "rank " : "ranks ";
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    s += (i == 0 ? "" : i + 1 == ranks.size() ? " and " : ", ") + std::to_string(ranks[i]);
  }
  return s;
}

[[noreturn]] void end_job(const std::string& why) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  std::fprintf(stderr, "kktrain[rank %d]: error: %s: aborting the job\n", me, why.c_str());
  std::fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
  std::_Exit(1);
}

// Whether world rank r is on this node and stopped (SIGSTOP, a frozen cgroup: state T in
// /proc/PID/stat). False when that cannot be told (another node).
bool stopped_here(int r) {
  int me = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &me);
  if (g_nodes.empty() ||
      g_nodes[static_cast<std::size_t>(r)] != g_nodes[static_cast<std::size_t>(me)]) {
    return false;
  }
  const std::string path = "/proc/" + std::to_string(g_pids[static_cast<std::size_t>(r)]) + "/stat";
  std::FILE* f = std::fopen(path.c_str(), "r");
  if (!f) return false;
  char buf[512];
  const std::size_t got = std::fread(buf, 1, sizeof(buf) - 1, f);
  std::fclose(f);
  buf[got] = '\0';
  const char* close = std::strrchr(buf, ')');  // "PID (COMM) STATE ..."
  return close && close[1] == ' ' && (close[2] == 'T' || close[2] == 't');
}

enum class Survey { completed, keep_waiting };

// The wait has seen no progress for stuck_peer_wait() seconds: returns completed when the
// requests completed meanwhile, keep_waiting when another rank is to speak or (with
// SilentPeer::ends_job_if_stopped) no silent rank is known to be stopped; otherwise ends the job.
Survey give_up(int n, MPI_Request* requests, const char* what, bool deferred, SilentPeer rule) {
  char waited[32];
  std::snprintf(waited, sizeof(waited), "%g", g_stuck_wait_s);
  const std::string setting =
      std::string(what) + " made no progress for " + waited + " s (distributed.stuck_peer_wait_s)";
  if (g_live == MPI_COMM_NULL) end_job(setting);
  bool completed = false;
  int speaker = 0, me = 0;
  MPI_Comm_rank(g_live, &me);
  const double grace = std::clamp(g_stuck_wait_s / 10.0, 0.5, 5.0);
  std::vector<int> silent = silent_ranks(n, requests, grace, &speaker, &completed);
  if (completed) return Survey::completed;
  if (rule == SilentPeer::ends_job_if_stopped) {
    // a silent rank may be working alone (rank 0 rendering the data): only a stopped one counts
    silent.erase(
        std::remove_if(silent.begin(), silent.end(), [](int r) { return !stopped_here(r); }),
        silent.end());
    if (silent.empty()) return Survey::keep_waiting;
  }
  if (speaker != me && !deferred) return Survey::keep_waiting;
  if (silent.empty()) {
    end_job(setting + ", and every rank answers (the ranks wait in different collectives)");
  }
  end_job(rank_list(silent) + " stopped answering: " + setting);
}

}  // namespace

void set_stuck_peer_wait(double seconds) {
  g_stuck_wait_s = seconds;
}

double stuck_peer_wait() {
  return g_stuck_wait_s;
}

void open_peer_liveness() {
  if (g_live != MPI_COMM_NULL) return;
  MPI_Comm_dup(MPI_COMM_WORLD, &g_live);
  int me = 0, world = 1;
  MPI_Comm_rank(g_live, &me);
  MPI_Comm_size(g_live, &world);
  MPI_Comm node;
  MPI_Comm_split_type(g_live, MPI_COMM_TYPE_SHARED, me, MPI_INFO_NULL, &node);
  int mine[2] = {static_cast<int>(::getpid()), me};
  MPI_Allreduce(MPI_IN_PLACE, &mine[1], 1, MPI_INT, MPI_MIN, node);  // the node's lowest rank
  MPI_Comm_free(&node);
  std::vector<int> all(2 * static_cast<std::size_t>(world));
  MPI_Allgather(mine, 2, MPI_INT, all.data(), 2, MPI_INT, g_live);
  for (int r = 0; r < world; ++r) {
    g_pids.push_back(all[2 * static_cast<std::size_t>(r)]);
    g_nodes.push_back(all[2 * static_cast<std::size_t>(r) + 1]);
  }
}

void answer_peer_pings() {
  if (g_live != MPI_COMM_NULL) answer_pings();
}

void wait_all(int n, MPI_Request* requests, const char* what, SilentPeer rule) {
  int done = 0;
  for (int i = 0; i < kSpinTests; ++i) {  // the usual wait ends here: no clock read
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return;
  }
  double since = now_s();
  for (int i = 1;; ++i) {  // then about kSpinSeconds more, the clock read every kSpinTests tests
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (i % kSpinTests == 0 && now_s() - since > kSpinSeconds) break;
  }
  int sleep_us = kFirstSleepUs;
  bool deferred = false;
  for (;;) {
    MPI_Testall(n, requests, &done, MPI_STATUSES_IGNORE);
    if (done) return;
    if (g_live != MPI_COMM_NULL) answer_pings();
    if (now_s() - since > g_stuck_wait_s) {
      if (give_up(n, requests, what, deferred, rule) == Survey::completed) return;
      deferred = true;  // another rank speaks (if it does not, this one will), or all are working
      since = now_s();
    }
    std::this_thread::sleep_for(std::chrono::microseconds(sleep_us));
    sleep_us = std::min(2 * sleep_us, kMaxSleepUs);
  }
}

}  // namespace kktrain
