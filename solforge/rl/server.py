"""``solforge serve``: the reward server trainers call, an ASGI app on Starlette.

Routes (every one but ``/health`` needs ``Authorization: Bearer TOKEN`` unless the server
was started with ``require_token=False``):

=========================  ==========================================================
``GET  /health``           ``{"status": "ok" | "stopped", ...}``; 503 once stopped
``GET  /metrics``          Prometheus text: rewards by stage, queue depth, evaluations
``POST /evaluate``         one solution or ``{"solutions": [...]}`` -> 202 ``{"task_ids"}``
``GET  /tasks/{id}``       a job: ``state`` (queued, running, done), then its reward,
                           the reward's stage and reason, and the visible feedback
``POST /reward``           as ``/evaluate``, but waits: ``{"rewards": [...], "results"}``
``POST /openrlhf``         OpenRLHF's remote reward: ``{"query", "prompts", "labels"}``
                           -> ``{"rewards", "scores", "extra_logs"}`` (also at ``/``)
=========================  ==========================================================

Bodies are read up to ``max_body_bytes`` (413 past it), must be JSON (400) of the shapes in
``wire.py`` (422 naming the field), name problems the server was started with (422 naming
the known ones) and hold at most ``max_batch`` solutions of at most
``max_solution_bytes`` each (413). Wrong or missing tokens get 401. Once the pool stopped
(a solution changed the evaluator's files) every route but ``/health`` answers 503.

The token never reaches a solution's environment: the judge's drops secret-looking names,
and the server takes the token out of its own when it starts. A solution can still read
files the server's user can (a token file among them): the token is removed from every
feedback text, so it cannot travel back to the policy either.

Not covered: TLS (put a reverse proxy in front for anything but loopback), rate limits
per client, several tokens or scopes.
"""

from __future__ import annotations

import hmac
import json
import time
from collections import Counter
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel, Field, SecretStr, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

from solforge.rl.jobs import Job, SlotPool
from solforge.rl.task import TaskError
from solforge.rl.wire import OpenRLHFRequest, Submission, parse_batch


class ServerLimits(BaseModel):
    """What one request may ask of the server."""

    max_body_bytes: int = Field(8 * 1024 * 1024, ge=1024, description="largest body read")
    max_batch: int = Field(512, ge=1, description="solutions in one request, at most")
    max_solution_bytes: int = Field(256 * 1024, ge=256, description="largest solution")
    max_queued: int = Field(20000, ge=1, description="jobs queued at once, at most (503)")
    wait_s: float = Field(3600.0, gt=0, description="longest a blocking /reward waits")


class _Refusal(Exception):
    def __init__(self, status: int, message: str, **extra: Any) -> None:
        super().__init__(message)
        self.status, self.message, self.extra = status, message, extra


def _error(status: int, message: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"error": message, **extra}, status_code=status, headers=headers)


def create_app(pool: SlotPool, token: SecretStr | None, limits: ServerLimits | None = None,
               require_token: bool = True) -> Starlette:
    """The ASGI app over ``pool`` (started and closed with the app's lifespan)."""
    lim = limits or ServerLimits()
    if require_token and (token is None or not token.get_secret_value()):
        raise ValueError("the reward server needs a token: set SOLFORGE_SERVE_TOKEN, pass "
                         "--token-file, or start it with --no-auth on a trusted loopback")
    expected = token.get_secret_value().encode() if token is not None else b""
    if expected:
        pool.redact.append(expected.decode())
    http: Counter[str] = Counter()
    started = time.time()

    def check(request: Request) -> None:
        if pool.stopped and request.url.path != "/health":
            raise _Refusal(503, pool.stopped)
        if not require_token:
            return
        got = request.headers.get("authorization", "")
        scheme, _, value = got.partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(),
                                                                 expected):
            raise _Refusal(401, "missing or wrong bearer token: send 'Authorization: "
                           "Bearer TOKEN' with the server's token")

    async def body(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > lim.max_body_bytes:
            raise _Refusal(413, f"the body is {declared} bytes; the limit is "
                           f"{lim.max_body_bytes}: send fewer solutions per request")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > lim.max_body_bytes:
                raise _Refusal(413, f"the body is over the {lim.max_body_bytes}-byte limit: "
                               "send fewer solutions per request")
            chunks.append(chunk)
        try:
            return json.loads(b"".join(chunks) or b"null")
        except (ValueError, UnicodeDecodeError) as e:
            raise _Refusal(400, f"the body is not JSON: {e}") from None

    def jobs_of(subs: list[Submission]) -> list[Job]:
        if len(subs) > lim.max_batch:
            raise _Refusal(413, f"{len(subs)} solutions in one request; the limit is "
                           f"{lim.max_batch}")
        out = []
        for i, sub in enumerate(subs):
            try:
                task = sub.task()
            except TaskError as e:
                raise _Refusal(422, f"solutions[{i}]: {e}") from None
            if task.problem not in pool.problems:
                known = sorted(pool.problems)
                raise _Refusal(422, f"solutions[{i}].problem {task.problem!r} is not served "
                               f"here; known: {', '.join(known[:50])}"
                               + (" ..." if len(known) > 50 else ""))
            text = sub.solution if sub.solution is not None else sub.completion or ""
            if len(text.encode()) > lim.max_solution_bytes:
                raise _Refusal(413, f"solutions[{i}] is {len(text.encode())} bytes; the "
                               f"limit is {lim.max_solution_bytes}")
            out.append(Job(task=task, source=sub.source()))
        depth = pool.depth()
        if depth["queued"] + len(out) > lim.max_queued:
            raise _Refusal(503, f"{depth['queued']} jobs are queued (limit {lim.max_queued}): "
                           "retry later")
        return out

    def validated(parse: Any, data: Any) -> list[Submission]:
        try:
            return parse(data)
        except ValidationError as e:
            first = e.errors()[0]
            where = ".".join(str(x) for x in first["loc"]) or "body"
            raise _Refusal(422, f"{where}: {first['msg']}", errors=len(e.errors())) from None
        except ValueError as e:
            raise _Refusal(422, str(e)) from None

    def endpoint(fn: Any, auth: bool = True) -> Any:
        async def wrapped(request: Request) -> Response:
            try:
                if auth:
                    check(request)
                response = await fn(request)
            except _Refusal as r:
                response = _error(r.status, r.message, **r.extra)
            http[f"{request.url.path.split('/')[1] or 'root'}:{response.status_code}"] += 1
            return response
        return wrapped

    async def health(request: Request) -> Response:
        depth = pool.depth()
        data = {"status": "stopped" if pool.stopped else "ok", "reason": pool.stopped,
                "slots": [s.device for s in pool.slots], "problems": len(pool.problems),
                "uptime_s": round(time.time() - started, 1), **depth}
        return JSONResponse(data, status_code=503 if pool.stopped else 200)

    async def metrics(request: Request) -> Response:
        depth = pool.depth()
        lines = ["# TYPE solforge_rewards_total counter"]
        lines += [f'solforge_rewards_total{{stage="{k}"}} {v}' for k, v in
                  sorted(pool.counts.items())]
        lines += ["# TYPE solforge_queue_depth gauge",
                  f"solforge_queue_depth {depth['queued']}",
                  "# TYPE solforge_running gauge", f"solforge_running {depth['running']}",
                  "# TYPE solforge_evaluations_total counter",
                  f"solforge_evaluations_total {pool.evaluations}",
                  "# TYPE solforge_cache_hits_total counter",
                  f"solforge_cache_hits_total {pool.cache_hits}",
                  "# TYPE solforge_evaluation_seconds_total counter",
                  f"solforge_evaluation_seconds_total {pool.eval_seconds:.3f}",
                  "# TYPE solforge_http_responses_total counter"]
        for key, v in sorted(http.items()):
            route, code = key.rsplit(":", 1)
            lines.append(f'solforge_http_responses_total{{route="{route}",code="{code}"}} {v}')
        lines.append(f"solforge_stopped {int(bool(pool.stopped))}")
        return PlainTextResponse("\n".join(lines) + "\n",
                                 media_type="text/plain; version=0.0.4")

    async def evaluate(request: Request) -> Response:
        jobs = jobs_of(validated(parse_batch, await body(request)))
        _submit(pool, jobs)
        return JSONResponse({"task_ids": [j.id for j in jobs]}, status_code=202)

    async def task(request: Request) -> Response:
        job = pool.get(request.path_params["id"])
        if job is None:
            raise _Refusal(404, f"no task {request.path_params['id']!r} (unknown, or "
                           "finished long enough ago to be forgotten)")
        return JSONResponse(job.to_json())

    async def finished(jobs: list[Job]) -> list[dict[str, Any]]:
        deadline = time.monotonic() + lim.wait_s
        for j in jobs:
            if not await j.wait(max(0.0, deadline - time.monotonic())):
                raise _Refusal(504, f"no answer within {lim.wait_s:g} s; the task ids stay "
                               "valid: poll GET /tasks/{id}",
                               task_ids=[x.id for x in jobs])
        return [j.to_json() for j in jobs]

    async def reward(request: Request) -> Response:
        jobs = jobs_of(validated(parse_batch, await body(request)))
        _submit(pool, jobs)
        results = await finished(jobs)
        return JSONResponse({"rewards": [r["reward"] for r in results], "results": results})

    async def openrlhf(request: Request) -> Response:
        data = await body(request)
        jobs = jobs_of(validated(lambda d: OpenRLHFRequest.model_validate(d).submissions(),
                                 data))
        _submit(pool, jobs)
        results = await finished(jobs)
        rewards = [r["reward"] for r in results]
        stages = Counter(r["result"]["stage"] for r in results)
        return JSONResponse({"rewards": rewards, "scores": rewards,
                             "extra_logs": {f"solforge/{k}": v / len(results)
                                            for k, v in sorted(stages.items())}})

    @asynccontextmanager
    async def lifespan(app: Starlette):
        pool.start()
        try:
            yield
        finally:
            pool.close()

    routes = [
        Route("/health", endpoint(health, auth=False), methods=["GET"]),
        Route("/metrics", endpoint(metrics), methods=["GET"]),
        Route("/evaluate", endpoint(evaluate), methods=["POST"]),
        Route("/tasks/{id}", endpoint(task), methods=["GET"]),
        Route("/reward", endpoint(reward), methods=["POST"]),
        Route("/openrlhf", endpoint(openrlhf), methods=["POST"]),
        Route("/", endpoint(openrlhf), methods=["POST"]),
    ]
    return Starlette(routes=routes, lifespan=lifespan)


def _submit(pool: SlotPool, jobs: list[Job]) -> None:
    try:
        pool.submit(jobs)
    except RuntimeError as e:
        raise _Refusal(503, str(e)) from None
