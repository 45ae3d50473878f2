"""One retry policy for every adapter: jittered exponential backoff honouring retry-after."""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from email.utils import parsedate_to_datetime
from typing import TypeVar
from urllib.parse import urlsplit

from kanban.agent.errors import (
    ContextOverflowError,
    FatalModelError,
    ModelError,
    OutageError,
    TransientModelError,
)

T = TypeVar("T")

# Statuses worth another try; every other 4xx means the same request will fail again.
RETRYABLE_STATUSES = frozenset({408, 409, 429})
# The provider is down or overloaded: a fallback model may answer at once.
OUTAGE_STATUSES = frozenset({502, 503, 504, 529})
# How providers say a request does not fit the context window.
OVERFLOW_PHRASES = ("context_length_exceeded", "context length", "context window",
                    "prompt is too long", "maximum context", "too many tokens",
                    "input is too long", "reduce the length")


@dataclass(frozen=True)
class RetryPolicy:
    """How often and how long to wait; `sleep` and `jitter` are injectable for tests."""

    max_retries: int = 5
    base_delay: float = 0.5
    max_delay: float = 30.0
    max_retry_after: float = 60.0
    sleep: Callable[[float], None] = time.sleep
    jitter: Callable[[], float] = field(default=random.random)
    hand_over_outages: bool = False  # raise OutageError at once (a fallback is waiting)

    def backoff(self, retry_number: int) -> float:
        """Delay before retry `retry_number` (0-based), with up to 25% jitter taken off."""
        delay = min(self.max_delay, self.base_delay * (2**retry_number))
        return delay * (1.0 - 0.25 * self.jitter())

    def delay(self, retry_number: int, failure: Failure) -> float:
        """The server's retry-after when it gave a sane one, else our backoff."""
        after = failure.retry_after
        if after is not None and 0 <= after <= self.max_retry_after:
            return after
        return self.backoff(retry_number)


@dataclass(frozen=True)
class Failure:
    """An SDK error translated by an adapter into a provider-neutral form."""

    message: str
    status: int | None = None
    retry_after: float | None = None
    refused: bool = False  # nothing listens at the address

    @property
    def retryable(self) -> bool:
        if self.status is None:  # connection errors and timeouts
            return True
        return self.status in RETRYABLE_STATUSES or self.status >= 500

    @property
    def outage(self) -> bool:
        return self.refused or self.status in OUTAGE_STATUSES

    @property
    def overflow(self) -> bool:
        lowered = self.message.lower()
        return self.status in (400, 413) and any(p in lowered for p in OVERFLOW_PHRASES)

    def describe(self) -> str:
        return f"HTTP {self.status}: {self.message}" if self.status else self.message


def call_with_retries(
    attempt: Callable[[], T],
    translate: Callable[[Exception], Failure | None],
    policy: RetryPolicy,
    *,
    provider: str,
    model: str,
    rotate_key: Callable[[], bool] = lambda: False,
    on_retry: Callable[[Failure], None] = lambda failure: None,
    endpoint: str = "",
) -> T:
    """Run `attempt`, retrying translated retryable failures; raise ModelError subclasses.

    On a 429, `rotate_key` may switch to another API key that has not been refused yet:
    then the call is repeated at once, without spending a retry. `on_retry` hears of each
    repeat (a streaming adapter tells its listener to forget the partial answer). Every
    error names `endpoint` (where the call went: see `endpoint_label`).
    """
    try:
        return _call(attempt, translate, policy, provider=provider, model=model,
                     rotate_key=rotate_key, on_retry=on_retry)
    except ModelError as exc:
        at_endpoint(exc, endpoint)
        raise


def at_endpoint(exc: ModelError, endpoint: str) -> ModelError:
    """`exc`, its message naming the endpoint tried (once; never an interruption's)."""
    if endpoint and exc.names_endpoint and f"(at {endpoint})" not in exc.message:
        exc.message = f"{exc.message} (at {endpoint})"
        exc.args = (exc.message,)
    return exc


def endpoint_label(base_url: str) -> str:
    """Where calls go, as host and path: never a user, password or query (keys hide there)."""
    parts = urlsplit(base_url)
    return f"{parts.hostname or ''}{f':{parts.port}' if parts.port else ''}{parts.path}"


def _call(
    attempt: Callable[[], T],
    translate: Callable[[Exception], Failure | None],
    policy: RetryPolicy,
    *,
    provider: str,
    model: str,
    rotate_key: Callable[[], bool],
    on_retry: Callable[[Failure], None],
) -> T:
    retry_number = 0
    while True:
        try:
            return attempt()
        except Exception as exc:
            failure = translate(exc)
            if failure is None:
                raise
        if failure.overflow:
            raise ContextOverflowError(f"{provider}: {failure.describe()}") from None
        if not failure.retryable:
            raise FatalModelError(fatal_message(provider, model, failure)) from None
        if failure.outage and policy.hand_over_outages:
            raise OutageError(f"{provider}: model {model!r} unavailable: "
                              f"{failure.describe()}") from None
        if failure.status == 429 and rotate_key():
            on_retry(failure)
            continue
        if retry_number >= policy.max_retries:
            break
        policy.sleep(policy.delay(retry_number, failure))
        retry_number += 1
        on_retry(failure)
    raise TransientModelError(
        f"{provider}: model {model!r} still failing after {policy.max_retries + 1} attempts: "
        f"{failure.describe()}"
    )


def fatal_message(provider: str, model: str, failure: Failure) -> str:
    """A one-line explanation of a failure that retrying cannot fix."""
    reason = {
        401: "authentication failed (check the API key)",
        403: "permission denied",
        404: f"model {model!r} not found (or the base URL is wrong)",
    }.get(failure.status or 0, "request refused")
    return f"{provider}: {reason}: {failure.describe()}"


def parse_retry_after(
    headers: Mapping[str, str], *, now: Callable[[], float] = time.time
) -> float | None:
    """Seconds to wait from `retry-after-ms`, or `retry-after` (seconds or an HTTP-date)."""
    lowered = {key.lower(): value for key, value in headers.items()}
    millis = _as_float(lowered.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000.0
    raw = lowered.get("retry-after")
    if raw is None:
        return None
    seconds = _as_float(raw)
    if seconds is not None:
        return seconds
    try:
        when = parsedate_to_datetime(raw)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # HTTP-dates are GMT
        when = when.replace(tzinfo=UTC)
    return max(0.0, when.timestamp() - now())


def status_failure(status: int, headers: Mapping[str, str], body: object, fallback: str) -> Failure:
    """A Failure for an HTTP error status, with the provider's own message when it sent one."""
    return Failure(
        message=provider_message(body) or fallback,
        status=status,
        retry_after=parse_retry_after(headers),
    )


def provider_message(body: object) -> str | None:
    """The `message` of an error body shaped `{"error": {"message": ...}}` or `{"message": ...}`."""
    if not isinstance(body, dict):
        return None
    inner = body.get("error")
    if isinstance(inner, dict) and isinstance(inner.get("message"), str):
        return inner["message"]
    message = body.get("message")
    return message if isinstance(message, str) else None


def _as_float(raw: str | None) -> float | None:
    if raw is None:
        return None
    try:
        value = float(raw.strip())
    except ValueError:
        return None
    return value if value >= 0 else None
