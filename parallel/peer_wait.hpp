// Waiting for other ranks without spinning a core and without end: every wait of the MPI
// communicator and of kktrain's ring (parallel/ring_collectives.hpp) completes its requests here.
//
// A wait tests its requests in a tight loop first (64 tests, no clock read: the usual wait of a
// chunk between running ranks ends there), then spins on for 2 ms (the clock read every 64 tests,
// no system call), then sleeps between tests, 50 us doubling to 1 ms, so a rank waiting for a slow
// or stopped peer uses a few percent of a core and oversleeps a wait by at most about half its
// length. A wait that sees no request complete for stuck_peer_wait() seconds
// (distributed.stuck_peer_wait_s) asks every rank of the job, over a communicator of its own,
// whether it answers: ranks waiting here answer at once; a stopped rank (SIGSTOP, a node frozen
// by the scheduler), a dead one or one blocked elsewhere does not. The lowest rank that answered
// prints one line naming the ranks that did not ("rank 1 stopped answering") and ends the job
// (MPI_Abort, exit 1); the others keep waiting for it to do so (after another full wait they
// speak themselves).
#pragma once

#include <mpi.h>

namespace kktrain {

// The wait above, in seconds (default 300; distributed.stuck_peer_wait_s).
void set_stuck_peer_wait(double seconds);
double stuck_peer_wait();

// Made once after MPI_Init, collectively over MPI_COMM_WORLD (MpiRuntime): the communicator the
// "do you answer" messages travel on, and every rank's process id and node. Without it a wait
// that times out names no rank.
void open_peer_liveness();

// What a wait that timed out does about ranks that did not answer: end the job (a collective's
// wait: every rank takes part in it), or only when one of them is known to be stopped (on this
// node, in state T), else wait on (an agreement after a step that one rank may run alone for
// long: rank 0 rendering the data or writing an export answers no one meanwhile).
enum class SilentPeer { ends_job, ends_job_if_stopped };

// MPI_Waitall's contract, with the waiting above; `what` names the collective for the message
// ("a reduce-scatter").
void wait_all(int n, MPI_Request* requests, const char* what,
              SilentPeer rule = SilentPeer::ends_job);
inline void wait_one(MPI_Request* request, const char* what,
                     SilentPeer rule = SilentPeer::ends_job) {
  wait_all(1, request, what, rule);
}

// Answers the "do you answer" messages that arrived: for a wait of its own (a failing rank's
// bounded wait for the others, parallel/agree.hpp).
void answer_peer_pings();

}  // namespace kktrain
