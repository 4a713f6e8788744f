"""A rank that stops answering (SIGSTOP, a node frozen by the scheduler) ends the job (issue 47).

usage: test_stopped_peer.py KKTRAIN INPUTS_DIR STOPPED_PEER CASE   (tests/cli/stopped_peer.cmake,
                                                                   label "safety")

- collectives: tests/tools/mpi_stopped_peer.cpp on 2 and 3 ranks: the last rank stops itself
  (SIGSTOP) before a reduce-scatter (kktrain's ring through the shared window, and point to
  point), an all-gather, an all-to-all, a scalar all-reduce and the agreement on errors after a
  step that the others wait in (the tool also runs allreduce and barrier). With
  distributed.stuck_peer_wait_s = 2 the job ends within the wait plus a margin, non-zero, with
  one error line naming the stopped rank (and no other rank as stopped), and each waiting rank
  used under 30% of a core while it waited (/proc/PID/stat), not the 75% of a spinning wait.
- busy_rank: a rank that works alone for twice the wait while the others wait in the agreement
  after that step (rank 0 rendering the data) does not end the job: only a rank known to be
  stopped ends it there.
- train: `kktrain train` on 2 ranks, rank 1 stopped by the test in the middle of the run
  (whatever collective rank 0 then waits in): the same.
Every process of the launch is continued and killed at the end, whatever happened.
"""

import os
import re
import signal
import subprocess
import sys
import tempfile
import time

import test_mpi as tm
import test_train as tt
from test_train import check

STOPPED_PEER = ""
WAIT_S = 2.0  # distributed.stuck_peer_wait_s of these runs
MARGIN_S = 20.0  # the job must end within WAIT_S + MARGIN_S of the stop (measured: under 2 s)
CPU_LIMIT = 0.30  # of one core, while a rank waits for the stopped one
TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """utime + stime of process pid (every thread), in seconds; None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
    except OSError:
        return None
    fields = s[s.rindex(")") + 2:].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            s = f.read()
        return s[s.rindex(")") + 2]
    except OSError:
        return None


def rank_of(pid):
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = f.read().split(b"\0")
    except OSError:
        return None
    for kv in env:
        if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
            return int(kv.split(b"=", 1)[1])
    return None


def rank_pids(p, exe):
    """{rank: pid} of the launch's processes running exe."""
    out = {}
    for pid in tm.session_pids(p.pid):
        try:
            target = os.readlink(f"/proc/{pid}/exe")
        except OSError:
            continue
        if os.path.basename(target) == os.path.basename(exe):
            r = rank_of(pid)
            if r is not None:
                out[r] = pid
    return out


def end_session(p):
    """Continues and kills every process the launch left (a stopped rank included)."""
    for sig in (signal.SIGCONT, signal.SIGKILL):
        for pid in tm.session_pids(p.pid):
            try:
                os.kill(pid, sig)
            except OSError:
                pass
    try:
        p.wait(10)
    except subprocess.TimeoutExpired:
        pass


def watch(p, waiting, stopped, t_stop, what, read_err):
    """Waits for the job's end after rank `stopped` stopped at t_stop: (rc, stderr, seconds from
    the stop, the waiting ranks' largest share of a core while they waited)."""
    time.sleep(0.5)  # the waiting ranks are past their spin phase
    t1 = time.monotonic()
    c1 = {r: cpu_seconds(pid) for r, pid in waiting.items()}
    share = 0.0
    while p.poll() is None and time.monotonic() - t_stop < WAIT_S + MARGIN_S:
        time.sleep(0.05)
        if time.monotonic() - t_stop < WAIT_S - 0.3:  # before the wait ends: still waiting
            t2 = time.monotonic()
            c2 = {r: cpu_seconds(pid) for r, pid in waiting.items()}
            for r in waiting:
                if c1[r] is not None and c2[r] is not None and t2 - t1 > 0.5:
                    share = max(share, (c2[r] - c1[r]) / (t2 - t1))
    seconds = time.monotonic() - t_stop
    if p.poll() is None:
        end_session(p)
        raise tt.Failure(f"{what}: still running {seconds:.0f} s after rank {stopped} stopped "
                         f"(the waiting ranks at {share:.0%} of a core)\n{read_err()[-3000:]}")
    return p.returncode, read_err(), seconds, share


def check_ending(rc, err, seconds, share, stopped, what):
    where = f"\n{what}: rc={rc}\nstderr:\n{err[-3000:]}"
    lines = [ln for ln in err.splitlines() if ln.startswith("kktrain") and ": error: " in ln]
    check(rc != 0, "expected a non-zero exit" + where)
    check(len(lines) == 1, f"expected one error line, got {len(lines)}" + where)
    named = set(int(r) for r in re.findall(r"rank (\d+) stopped answering", lines[0]))
    check(named == {stopped}, f"the line should name rank {stopped} as stopped" + where)
    check("stuck_peer_wait_s" in lines[0], "the line should name the setting" + where)
    check(WAIT_S - 0.5 <= seconds < WAIT_S + MARGIN_S,
          f"the job ended {seconds:.1f} s after the stop (wait {WAIT_S} s)" + where)
    check(share < CPU_LIMIT, f"a waiting rank used {share:.0%} of a core while it waited" + where)
    return lines[0]


def launch(cmd, tmp):
    err_path = os.path.join(tmp, "stderr")
    ferr = open(err_path, "w")
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=ferr, start_new_session=True)
    ferr.close()

    def read_err():
        with open(err_path, errors="replace") as f:
            return tt.without_launch_warnings(f.read())
    return p, read_err


def case_collectives():
    runs = [(2, "reduce_scatter", []), (2, "reduce_scatter", ["point_to_point"]),
            (3, "reduce_scatter", []), (2, "allgather", []), (3, "alltoall", []),
            (3, "scalar", []), (2, "agreement", []), (3, "agreement", [])]
    for np_, coll, extra in runs:
        what = f"{np_} ranks, {coll} {' '.join(extra)}".strip()
        with tempfile.TemporaryDirectory(prefix="kktrain_stopped_") as tmp:
            p, read_err = launch(tm.mpirun(np_) + [STOPPED_PEER, str(WAIT_S), coll, *extra], tmp)
            try:
                stopped = np_ - 1
                t0 = time.monotonic()
                pids = {}
                while time.monotonic() - t0 < 60 and p.poll() is None:
                    pids = rank_pids(p, STOPPED_PEER)
                    if len(pids) == np_ and state(pids[stopped]) == "T" and \
                            read_err().count("waiting ") == np_ - 1:
                        break
                    time.sleep(0.02)
                check(len(pids) == np_ and state(pids[stopped]) == "T",
                      f"{what}: rank {stopped} did not stop\n{read_err()[-3000:]}")
                t_stop = time.monotonic()
                waiting = {r: pid for r, pid in pids.items() if r != stopped}
                rc, err, s, share = watch(p, waiting, stopped, t_stop, what, read_err)
                line = check_ending(rc, err, s, share, stopped, what)
                print(f"{what}: ended {s:.1f} s after rank {stopped} stopped, the waiting ranks "
                      f"at {share:.0%} of a core: {line}")
            finally:
                end_session(p)


def case_busy_rank():
    """A rank that works alone longer than the wait (rank 0 rendering the data while the others
    wait in the agreement after it) is not taken for a stopped one: the job completes."""
    with tempfile.TemporaryDirectory(prefix="kktrain_stopped_") as tmp:
        p, read_err = launch(tm.mpirun(2) + [STOPPED_PEER, str(WAIT_S), "agreement_busy"], tmp)
        try:
            try:
                p.wait(2 * WAIT_S + 60)
            except subprocess.TimeoutExpired:
                raise tt.Failure(f"still running after {2 * WAIT_S + 60} s\n{read_err()[-3000:]}")
            err = read_err()
            check(p.returncode == 0 and ": error: " not in err,
                  f"a busy rank ended the job: rc={p.returncode}\n{err[-3000:]}")
            print(f"2 ranks, rank 1 busy for {2 * WAIT_S + 1:.0f} s in an agreement (wait "
                  f"{WAIT_S} s): completed")
        finally:
            end_session(p)


def case_train():
    with tempfile.TemporaryDirectory(prefix="kktrain_stopped_") as tmp:
        out = os.path.join(tmp, "run")
        args = ["train", tt.config(tt.DEFAULT), *tt.TINY, "data.global_batch_size=4",
                "train.max_steps=1000000", "train.log_every=1", "train.val_every=0",
                "checkpoint.save_every=0", f"distributed.stuck_peer_wait_s={WAIT_S}",
                f"train.output_dir={out}"]
        p, read_err = launch(tm.mpirun(2) + [tt.KKTRAIN, *args], tmp)
        try:
            metrics = os.path.join(out, "metrics.jsonl")
            t0 = time.monotonic()
            while time.monotonic() - t0 < 60 and p.poll() is None:
                if os.path.exists(metrics) and open(metrics).read().count("\n") >= 20:
                    break
                time.sleep(0.05)
            pids = rank_pids(p, tt.KKTRAIN)
            check(p.poll() is None and len(pids) == 2,
                  f"the run did not reach step 20 (exit {p.poll()})\n{read_err()[-3000:]}")
            os.kill(pids[1], signal.SIGSTOP)
            t_stop = time.monotonic()
            rc, err, s, share = watch(p, {0: pids[0]}, 1, t_stop, "train, 2 ranks", read_err)
            line = check_ending(rc, err, s, share, 1, "train, 2 ranks")
            print(f"train, 2 ranks: ended {s:.1f} s after rank 1 stopped, rank 0 at {share:.0%} "
                  f"of a core: {line}")
        finally:
            end_session(p)


if __name__ == "__main__":
    if len(sys.argv) != 5:
        print(__doc__)
        sys.exit(2)
    STOPPED_PEER = sys.argv[3]
    del sys.argv[3]
    sys.exit(tt.run_case(globals(), __doc__))
