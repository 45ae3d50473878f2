"""procrastinate and pgqueuer for the PostgreSQL rows (bench.postgres): for each, fill a
queue, run claim+finish cycles in a time box, and measure enqueue→task-start latency in its
own worker."""

from __future__ import annotations

import asyncio
import time
import uuid
from contextlib import suppress
from datetime import timedelta

from bench.common import start_together

BATCH = 1  # one item per claim, kanban's too: a cycle is one claim and one finish


# --- procrastinate ------------------------------------------------------------------------

def _procrastinate_app(url: str):  # type: ignore[no-untyped-def]
    import procrastinate

    return procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=url))


def procrastinate_fill(url: str, jobs: int) -> None:
    from procrastinate import jobs as jobs_module

    async def fill() -> None:
        app = _procrastinate_app(url)
        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            batch = [jobs_module.Job(id=None, queue="default", lock=None, queueing_lock=None,
                                     task_name="bench") for _ in range(jobs)]
            for start in range(0, jobs, 500):
                await app.job_manager.batch_defer_jobs_async(batch[start:start + 500])

    asyncio.run(fill())


def procrastinate_cycles(url: str, seconds: float, start_at: float) -> tuple[int, float, float]:
    from procrastinate.jobs import Status

    async def cycles() -> tuple[int, float, float]:
        app = _procrastinate_app(url)
        done = 0
        async with app.open_async():
            manager = app.job_manager
            worker_id = await manager.register_worker()
            began = start_together(start_at)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                job = await manager.fetch_job(queues=None, worker_id=worker_id)
                if job is None:
                    break
                await manager.finish_job(job, Status.SUCCEEDED, delete_job=False)
                done += 1
        return done, began, time.time()

    return asyncio.run(cycles())


def procrastinate_latency(url: str, samples: int) -> list[float]:
    async def measure() -> list[float]:
        app = _procrastinate_app(url)
        started: dict[int, float] = {}

        @app.task(name="probe", pass_context=True)
        async def probe(context, n: int) -> None:  # type: ignore[no-untyped-def]
            started[n] = time.perf_counter()

        async with app.open_async():
            await app.schema_manager.apply_schema_async()
            worker = asyncio.create_task(app.run_worker_async(
                concurrency=1, wait=True, install_signal_handlers=False,
                listen_notify=True, fetch_job_polling_interval=5.0))
            await asyncio.sleep(0.5)  # the worker listening
            latencies = []
            for n in range(samples):
                added = time.perf_counter()  # from the call: its worker may start the job
                await probe.defer_async(n=n)  # before this await hands control back
                while n not in started:
                    await asyncio.sleep(0.0002)
                latencies.append((started[n] - added) * 1000)
            worker.cancel()
            with suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(worker, timeout=10)
            return latencies

    return asyncio.run(measure())


# --- pgqueuer -----------------------------------------------------------------------------

async def _pgqueuer(url: str):  # type: ignore[no-untyped-def]
    import psycopg
    from pgqueuer.queries import Queries

    conn = await psycopg.AsyncConnection.connect(url, autocommit=True)
    return conn, Queries.from_psycopg_connection(conn)


def pgqueuer_fill(url: str, jobs: int) -> None:
    async def fill() -> None:
        conn, queries = await _pgqueuer(url)
        try:
            await queries.install()
            for start in range(0, jobs, 500):
                n = min(500, jobs - start)
                await queries.enqueue(["bench"] * n, [None] * n, [0] * n)
        finally:
            await conn.close()

    asyncio.run(fill())


def pgqueuer_cycles(url: str, seconds: float, start_at: float, batch: int = BATCH
                    ) -> tuple[int, float, float]:
    """Dequeue `batch` jobs at a time and log them all finished in one call."""
    from pgqueuer.queries import EntrypointExecutionParameter

    async def cycles() -> tuple[int, float, float]:
        conn, queries = await _pgqueuer(url)
        done = 0
        manager = uuid.uuid4()
        entrypoints = {"bench": EntrypointExecutionParameter(concurrency_limit=0)}
        try:
            began = start_together(start_at)
            end = time.monotonic() + seconds
            while time.monotonic() < end:
                jobs = await queries.dequeue(batch, entrypoints, manager, None,
                                             timedelta(seconds=60))
                if not jobs:
                    break
                await queries.log_jobs([(job, "successful", None) for job in jobs])
                done += len(jobs)
            finished = time.time()
        finally:
            await conn.close()
        return done, began, finished

    return asyncio.run(cycles())


def pgqueuer_latency(url: str, samples: int) -> list[float]:
    from pgqueuer import PgQueuer
    from pgqueuer.db import PsycopgDriver

    async def measure() -> list[float]:
        import psycopg

        conn, queries = await _pgqueuer(url)
        await queries.install()
        listen = await psycopg.AsyncConnection.connect(url, autocommit=True)
        pgq = PgQueuer(PsycopgDriver(listen))
        started: dict[int, float] = {}

        @pgq.entrypoint("probe")
        async def probe(job) -> None:  # type: ignore[no-untyped-def]
            started[int(job.payload.decode())] = time.perf_counter()

        runner = asyncio.create_task(pgq.run(dequeue_timeout=timedelta(seconds=5)))
        await asyncio.sleep(0.5)  # the queue manager listening
        latencies = []
        try:
            for n in range(samples):
                added = time.perf_counter()  # from the call, as for procrastinate
                await queries.enqueue("probe", str(n).encode())
                while n not in started:
                    await asyncio.sleep(0.0002)
                latencies.append((started[n] - added) * 1000)
        finally:
            pgq.shutdown.set()
            try:
                await asyncio.wait_for(runner, timeout=10)
            except (asyncio.CancelledError, TimeoutError):
                runner.cancel()
            await listen.close()
            await conn.close()
        return latencies

    return asyncio.run(measure())
