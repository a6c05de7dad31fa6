"""Temporal's side of the peer comparison (protocol: protocol.py).

One process is both the worker (temporalio) and the client, on the server
at $FUSEE_PEER_TEMPORAL (host:port, loopback). A step is an activity: its
result is recorded in the workflow's history on the server (SQLite there)
before the workflow goes on, as a Fusee step's record is made durable.
Workflows run unsandboxed (the SDK's lighter runner: less CPU per task
for Temporal, not more).
"""

import asyncio
import os
import time
import uuid
from datetime import timedelta

from temporalio import activity, workflow
from temporalio.client import Client
from temporalio.worker import UnsandboxedWorkflowRunner, Worker

from protocol import Stamps, check, emit, main, wait_go

QUEUE = "fusee-peer"
STAMPS = Stamps()
# A no-op activity's bound: after a worker dies, its activities in flight
# are retried once this passes (the recovery workload waits for it).
TIMEOUT = timedelta(seconds=10)


@activity.defn
async def stamp() -> None:
    STAMPS.push()


@activity.defn
async def noop() -> None:
    pass


@workflow.defn
class Chain:
    @workflow.run
    async def run(self, n: int) -> int:
        for _ in range(n):
            await workflow.execute_activity(stamp, start_to_close_timeout=TIMEOUT)
        return n


@workflow.defn
class Steps:
    @workflow.run
    async def run(self, n: int) -> int:
        for _ in range(n):
            await workflow.execute_activity(noop, start_to_close_timeout=TIMEOUT)
        return n


@workflow.defn
class Sleeper:
    @workflow.run
    async def run(self, ms: int) -> int:
        await asyncio.sleep(ms / 1000.0)  # a durable timer on the server
        return ms


async def connect():
    client = await Client.connect(os.environ["FUSEE_PEER_TEMPORAL"])
    worker = Worker(
        client,
        task_queue=QUEUE,
        workflows=[Chain, Steps, Sleeper],
        activities=[stamp, noop],
        workflow_runner=UnsandboxedWorkflowRunner(),
        max_concurrent_workflow_tasks=200,
        max_concurrent_activities=200,
    )
    return client, worker


async def chain(wid, steps):
    steps = int(steps)
    client, worker = await connect()
    async with worker:
        await warm_up(client)
        wait_go()
        got = await client.execute_workflow(Chain.run, steps, id=wid, task_queue=QUEUE)
        check(wid, got, steps)
    gaps = STAMPS.take_gaps_us()
    if len(gaps) != steps - 1:
        raise RuntimeError(f"{len(gaps) + 1} steps ran, {steps} asked")
    return {"gaps_us": gaps}


async def warm_up(client):
    # The first workflow after the server's start pays for its task queue's
    # creation: one short one before anything is timed.
    got = await client.execute_workflow(
        Steps.run, 1, id=f"warm-{uuid.uuid4()}", task_queue=QUEUE
    )
    check("warm-up", got, 1)


async def start_all(client, wf, prefix, n, arg):
    # Fresh ids per process start would hide a lost run: ids are the
    # driver's, one per run, as Fusee's.
    return await asyncio.gather(
        *(client.start_workflow(wf, arg, id=f"{prefix}-{i}", task_queue=QUEUE) for i in range(n))
    )


async def await_all(client, prefix, n, expected, progress=False):
    done = 0

    async def one(i):
        nonlocal done
        got = await client.get_workflow_handle(f"{prefix}-{i}").result()
        check(f"{prefix}-{i}", got, expected)
        done += 1
        if progress:
            emit(done=done)

    await asyncio.gather(*(one(i) for i in range(n)))


async def fanout(prefix, runs, steps):
    runs, steps = int(runs), int(steps)
    client, worker = await connect()
    async with worker:
        await warm_up(client)
        t = time.perf_counter()
        await start_all(client, Steps.run, prefix, runs, steps)
        await await_all(client, prefix, runs, steps, progress=True)
        elapsed = time.perf_counter() - t
    return {"steps": runs * steps, "elapsed_s": elapsed}


async def timers(prefix, n, ms):
    n, ms = int(n), int(ms)
    client, worker = await connect()
    async with worker:
        await warm_up(client)
        t = time.perf_counter()
        await start_all(client, Sleeper.run, prefix, n, ms)
        await await_all(client, prefix, n, ms)
        elapsed = time.perf_counter() - t
    return {"all_done_s": elapsed}


async def recover(prefix, runs, steps):
    runs, steps = int(runs), int(steps)
    t = time.perf_counter()
    client, worker = await connect()
    async with worker:
        await await_all(client, prefix, runs, steps)
        elapsed = time.perf_counter() - t
    return {"elapsed_s": elapsed, "completed": runs}


if __name__ == "__main__":
    main({"chain": chain, "fanout": fanout, "timers": timers, "recover": recover})
