"""The shared retry helper: backoff, retry-after, fatal and transient outcomes."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import format_datetime

import pytest

from kanban.agent import FatalModelError, RetryPolicy, TransientModelError
from kanban.agent.retry import Failure, call_with_retries, parse_retry_after, provider_message


class Flaky:
    """Fails with the given failures in turn, then returns "ok"."""

    def __init__(self, *failures: Failure) -> None:
        self.failures = list(failures)
        self.attempts = 0

    def __call__(self) -> str:
        self.attempts += 1
        if self.failures:
            raise FailureError(self.failures.pop(0))
        return "ok"


class FailureError(Exception):
    def __init__(self, failure: Failure) -> None:
        super().__init__(failure.message)
        self.failure = failure


def translate(exc: Exception) -> Failure | None:
    return exc.failure if isinstance(exc, FailureError) else None


def policy(waits: list[float], **kwargs: float) -> RetryPolicy:
    return RetryPolicy(sleep=waits.append, jitter=lambda: 0.0, **kwargs)  # type: ignore[arg-type]


def call(attempt: Flaky, retry: RetryPolicy) -> str:
    return call_with_retries(attempt, translate, retry, provider="test", model="m")


def test_retryable_failures_back_off_exponentially_then_succeed() -> None:
    waits: list[float] = []
    attempt = Flaky(Failure("busy", 500), Failure("down", 503), Failure("reset"))
    assert call(attempt, policy(waits)) == "ok"
    assert attempt.attempts == 4
    assert waits == [0.5, 1.0, 2.0]


def test_backoff_is_capped_and_jittered() -> None:
    retry = RetryPolicy(base_delay=0.5, max_delay=30, jitter=lambda: 1.0)
    assert retry.backoff(0) == 0.375  # 25% jitter taken off
    assert retry.backoff(20) == 22.5
    assert RetryPolicy(jitter=lambda: 0.0).backoff(10) == 30.0


def test_retry_after_is_honoured() -> None:
    waits: list[float] = []
    attempt = Flaky(Failure("slow down", 429, retry_after=7.0))
    assert call(attempt, policy(waits)) == "ok"
    assert waits == [7.0]


def test_absurd_retry_after_falls_back_to_backoff() -> None:
    waits: list[float] = []
    call(Flaky(Failure("slow down", 429, retry_after=3600.0)), policy(waits))
    assert waits == [0.5]


@pytest.mark.parametrize(
    ("status", "words"),
    [(401, "authentication failed"), (403, "permission denied"), (404, "model 'm' not found"),
     (400, "request refused")],
)
def test_fatal_statuses_are_not_retried(status: int, words: str) -> None:
    waits: list[float] = []
    attempt = Flaky(Failure("provider says no", status))
    with pytest.raises(FatalModelError) as info:
        call(attempt, policy(waits))
    assert attempt.attempts == 1 and waits == []
    assert words in info.value.message
    assert f"HTTP {status}: provider says no" in info.value.message


def test_exhausted_retries_raise_transient() -> None:
    waits: list[float] = []
    attempt = Flaky(*[Failure("overloaded", 529)] * 10)
    with pytest.raises(TransientModelError, match="after 3 attempts: HTTP 529: overloaded"):
        call(attempt, policy(waits, max_retries=2))
    assert attempt.attempts == 3 and len(waits) == 2


def test_untranslated_exceptions_propagate() -> None:
    def broken() -> str:
        raise KeyError("bug")

    with pytest.raises(KeyError):
        call_with_retries(broken, translate, RetryPolicy(), provider="t", model="m")


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({"retry-after": "2"}, 2.0),
        ({"Retry-After": "1.5"}, 1.5),
        ({"retry-after-ms": "250", "retry-after": "9"}, 0.25),
        ({"retry-after": "soon"}, None),
        ({"retry-after": "-3"}, None),
        ({}, None),
    ],
)
def test_parse_retry_after(headers: dict[str, str], seconds: float | None) -> None:
    assert parse_retry_after(headers) == seconds


def test_parse_retry_after_http_date() -> None:
    now = datetime(2030, 1, 1, 12, 0, 0, tzinfo=UTC).timestamp()
    later = format_datetime(datetime(2030, 1, 1, 12, 0, 30, tzinfo=UTC), usegmt=True)
    assert parse_retry_after({"retry-after": later}, now=lambda: now) == 30.0
    assert parse_retry_after({"retry-after": later}, now=lambda: now + 60) == 0.0


def test_provider_message_reads_both_error_shapes() -> None:
    assert provider_message({"error": {"message": "anthropic style"}}) == "anthropic style"
    assert provider_message({"message": "openai inner body"}) == "openai inner body"
    assert provider_message("plain text") is None
