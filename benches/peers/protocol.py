"""The line protocol between fusee-compare and a peer's program.

fusee-compare starts `python PEER.py COMMAND ARGS...` and reads stdout, one
JSON object per line (benches/src/engine/peers/protocol.rs parses them):

  {"ready": true}             set up (connected, registered); the chain
                              then waits for one line on stdin ("go") so
                              the driver can attach strace first
  {"done": K}                 K runs of a fanout have finished (the
                              recovery workload kills the process at half)
  {"result": {...}}           the figures, last line, then exit 0
  {"error": "why"}            the workload failed, then exit 1

Commands and their results:
  chain ID STEPS              {"gaps_us": [...]}: from each step's start to
                              the next one's, as Fusee's chain measures
  fanout PREFIX RUNS STEPS    {"steps": N, "elapsed_s": T}: RUNS workflows
                              of STEPS steps started at once, first start
                              to last result, every output checked
  timers PREFIX N SLEEP_MS    {"all_done_s": T}: N workflows that sleep on
                              a durable timer, first start to last result
  recover PREFIX RUNS STEPS   {"elapsed_s": T, "completed": N}: in a fresh
                              process after a SIGKILL mid-fanout, from the
                              start until every run PREFIX-i has its output
"""

import json
import os
import sys
import time


def emit(**fields):
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


def wait_go():
    emit(ready=True)
    sys.stdin.readline()


class Stamps:
    """When each chain step ran (monotonic ns), in order."""

    def __init__(self):
        self.t = []

    def push(self):
        self.t.append(time.perf_counter_ns())

    def take_gaps_us(self):
        t, self.t = self.t, []
        return [(b - a) / 1000.0 for a, b in zip(t, t[1:])]


def check(name, got, expected):
    if got != expected:
        raise RuntimeError(f"{name} returned {got!r}, expected {expected!r}")


def main(handlers):
    """Runs the command in argv with `handlers[command](*args)` (async),
    printing its result or its error."""
    import asyncio

    if len(sys.argv) < 2 or sys.argv[1] not in handlers:
        emit(error=f"usage: {sys.argv[0]} {'|'.join(handlers)} ARGS...")
        sys.exit(2)
    try:
        result = asyncio.run(handlers[sys.argv[1]](*sys.argv[2:]))
    except Exception as e:  # the driver reports it; the peer is measured as is
        emit(error=f"{type(e).__name__}: {e}")
        os._exit(1)
    emit(result=result)
    # Without the interpreter's teardown: temporalio's native threads abort
    # it ("PyGILState_Release") after the work is done and said.
    os._exit(0)
