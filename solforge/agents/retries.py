"""Retries of model calls: exponential backoff with jitter, honouring ``Retry-After``, on
429, 5xx, connection errors and timeouts; a context-length rejection and fatal errors
(a refused key, an unknown model) raise at once with what to fix. The SDKs' own retries
are off (the clients pass ``max_retries=0``) so every wait is visible to the caller.

Not covered: SDKs other than ``openai`` and ``anthropic`` (a plug-in client classifies
its own exceptions and may reuse :func:`call_with_retries`).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from solforge.agents.errors import ContextTooLong, ModelError
from solforge.agents.model import ModelConfig

T = TypeVar("T")


@dataclass
class Failure:
    """How a client classifies an SDK exception: retry it, trim the context, or give up."""

    kind: Literal["retry", "context", "fatal"]
    message: str
    retry_after: float | None = None


def classify_sdk_error(exc: Exception, sdk: Any, config: ModelConfig, key_env: str | None,
                       url: str) -> Failure | None:
    """Classify an exception of the ``openai`` or ``anthropic`` SDK (same class names).

    None for exceptions that are not the SDK's (bugs of ours: let them raise).
    """
    if isinstance(exc, sdk.APITimeoutError):
        return Failure("retry", f"no answer from {url} within {config.timeout_s:g} s")
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc
        return Failure("retry", f"cannot reach {url} ({cause}): check --base-url "
                       "and that the server is up")
    if not isinstance(exc, sdk.APIStatusError):
        return None
    status = exc.status_code
    detail = _error_detail(exc)
    where = f"HTTP {status} from {url}"
    if status == 429 or status >= 500:
        return Failure("retry", f"{where}: {detail}", _retry_after(exc))
    low = detail.lower()
    if status in (400, 413) and any(s in low for s in (
            "context length", "context_length", "maximum context", "prompt is too long",
            "too many tokens", "context window", "input is too long")):
        return Failure("context", f"{where}: {detail}")
    if status in (401, 403):
        fix = f"check {key_env} or --api-key" if key_env else "check --api-key"
        return Failure("fatal", f"{where}: the key was refused ({detail}): {fix}")
    if status == 404:
        return Failure("fatal", f"{where}: {detail}: check --model ({config.model!r}) and "
                       "--base-url")
    return Failure("fatal", f"{where}: {detail}")


def _error_detail(exc: Any) -> str:
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:500]
        if body.get("message"):
            return str(body["message"])[:500]
    return str(getattr(exc, "message", "") or exc)[:500]


def _retry_after(exc: Any) -> float | None:
    headers = getattr(getattr(exc, "response", None), "headers", None) or {}
    for name, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is not None:
            try:
                return max(0.0, float(value) * scale)
            except ValueError:
                continue  # an HTTP date: fall back to our own backoff
    return None


def call_with_retries(fn: Callable[[], T], classify: Callable[[Exception], Failure | None],
                      config: ModelConfig,
                      on_retry: Callable[[int, float, str], None] | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> T:
    """``fn()``, retried on retryable failures with exponential backoff and jitter.

    Raises :class:`ContextTooLong` at once for a context-length rejection and
    :class:`ModelError` for anything fatal or still failing after ``max_retries``.
    """
    attempt = 0
    while True:
        try:
            return fn()
        except Exception as e:
            failure = classify(e)
            if failure is None:
                raise
            if failure.kind == "context":
                raise ContextTooLong(failure.message) from None
            if failure.kind == "fatal":
                raise ModelError(failure.message) from None
            if attempt >= config.max_retries:
                raise ModelError(f"{failure.message} (gave up after {attempt + 1} attempts)"
                                 ) from None
            wait = config.backoff_s * 2 ** attempt * (0.5 + random.random() / 2)
            if failure.retry_after is not None:
                wait = max(wait, failure.retry_after)
            wait = min(wait, config.backoff_max_s)
            if on_retry is not None:
                on_retry(attempt + 1, wait, failure.message)
            sleep(wait)
            attempt += 1
