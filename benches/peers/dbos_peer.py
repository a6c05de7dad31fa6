"""DBOS Transact's side of the peer comparison (protocol: protocol.py).

DBOS is a library: this process runs the workflows itself, its state in
the system database at $FUSEE_PEER_DBOS_URL (`sqlite:///PATH`, or a
PostgreSQL URL on loopback). A step is a `@DBOS.step()`: its output is
committed to the system database before the workflow goes on. Each start
gives the workflow its id (`SetWorkflowID`), so a fresh process after a
SIGKILL finds the runs: `DBOS.launch()` recovers the pending ones.
"""

import asyncio
import os
import time
import uuid

from dbos import DBOS, SetWorkflowID

from protocol import Stamps, check, emit, main, wait_go

STAMPS = Stamps()


@DBOS.step()
async def stamp() -> None:
    STAMPS.push()


@DBOS.step()
async def noop() -> None:
    pass


@DBOS.workflow()
async def chain_wf(n: int) -> int:
    for _ in range(n):
        await stamp()
    return n


@DBOS.workflow()
async def steps_wf(n: int) -> int:
    for _ in range(n):
        await noop()
    return n


@DBOS.workflow()
async def sleeper_wf(ms: int) -> int:
    await DBOS.sleep_async(ms / 1000.0)  # durable: the wake-up time is recorded
    return ms


async def warm_up():
    # As every peer: one short workflow before anything is timed.
    with SetWorkflowID(f"warm-{uuid.uuid4()}"):
        handle = await DBOS.start_workflow_async(steps_wf, 1)
    check("warm-up", await handle.get_result(), 1)


def launch():
    DBOS(
        config={
            "name": "fusee-peer",
            "system_database_url": os.environ["FUSEE_PEER_DBOS_URL"],
            "run_admin_server": False,
            "enable_otlp": False,
            "log_level": "WARNING",
        }
    )
    DBOS.launch()


async def start_all(wf, prefix, n, arg):
    handles = []
    for i in range(n):
        with SetWorkflowID(f"{prefix}-{i}"):
            handles.append(await DBOS.start_workflow_async(wf, arg))
    return handles


async def await_all(prefix, n, expected, progress=False):
    done = 0

    async def one(i):
        nonlocal done
        handle = await DBOS.retrieve_workflow_async(f"{prefix}-{i}")
        check(f"{prefix}-{i}", await handle.get_result(), expected)
        done += 1
        if progress:
            emit(done=done)

    await asyncio.gather(*(one(i) for i in range(n)))


async def chain(wid, steps):
    steps = int(steps)
    launch()
    await warm_up()
    wait_go()
    with SetWorkflowID(wid):
        handle = await DBOS.start_workflow_async(chain_wf, steps)
    check(wid, await handle.get_result(), steps)
    gaps = STAMPS.take_gaps_us()
    if len(gaps) != steps - 1:
        raise RuntimeError(f"{len(gaps) + 1} steps ran, {steps} asked")
    return {"gaps_us": gaps}


async def fanout(prefix, runs, steps):
    runs, steps = int(runs), int(steps)
    launch()
    await warm_up()
    t = time.perf_counter()
    await start_all(steps_wf, prefix, runs, steps)
    await await_all(prefix, runs, steps, progress=True)
    return {"steps": runs * steps, "elapsed_s": time.perf_counter() - t}


async def timers(prefix, n, ms):
    n, ms = int(n), int(ms)
    launch()
    await warm_up()
    t = time.perf_counter()
    await start_all(sleeper_wf, prefix, n, ms)
    await await_all(prefix, n, ms)
    return {"all_done_s": time.perf_counter() - t}


async def recover(prefix, runs, steps):
    runs, steps = int(runs), int(steps)
    t = time.perf_counter()
    launch()  # recovers this executor's pending workflows
    await await_all(prefix, runs, steps)
    return {"elapsed_s": time.perf_counter() - t, "completed": runs}


if __name__ == "__main__":
    main({"chain": chain, "fanout": fanout, "timers": timers, "recover": recover})
