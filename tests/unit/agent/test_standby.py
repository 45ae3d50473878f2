"""Threads started ahead of need (kanban.agent.standby): a job runs on one when there is
one, on a new thread otherwise, and each standby thread runs one job, then ends."""

from __future__ import annotations

import threading

from kanban.agent import standby


def test_a_job_runs_on_a_thread_started_ahead_then_on_new_ones() -> None:
    standby.start(1)
    ahead = standby._ready[-1].thread
    assert ahead.is_alive()  # up and waiting before any job
    ran_on: list[threading.Thread] = []
    done = threading.Event()

    def job() -> None:
        ran_on.append(threading.current_thread())
        done.set()

    thread = standby.run_in_thread(job, "first job")
    assert thread is ahead and thread.name == "first job"
    assert done.wait(10) and ran_on == [ahead]
    thread.join(10)
    assert not thread.is_alive()  # one job, then it ends
    done.clear()
    fresh = standby.run_in_thread(job, "second job")  # none left ahead: a new thread
    assert done.wait(10) and fresh is not ahead and ran_on[-1] is fresh
    fresh.join(10)
