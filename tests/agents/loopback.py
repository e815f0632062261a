"""A scripted model server on loopback that speaks the OpenAI and Anthropic HTTP protocols.

The agent's real SDK clients talk to it over real HTTP; nothing is mocked. Each request
takes the next item of the script:

- :class:`Reply`: an assistant turn (text and tool calls), rendered in the format of the
  endpoint that was hit (``/v1/chat/completions``: OpenAI ``tool_calls`` with JSON-string
  arguments; ``/v1/messages``: Anthropic ``tool_use`` blocks), with usage;
- :class:`HttpError`: a status code, an error body in the endpoint's format, headers;
- a function of the request (an :class:`Request`) returning either of those, so a reply
  can depend on what the agent sent (echo a file it read, check an error it received).

A request that finds the script empty gets HTTP 400 (not retried by the clients) and
``server.exhausted`` is set; a script function that raises (a failed ``assert`` on the
request) also gets HTTP 400 and lands in ``server.errors``. Either way the agent stops at
once and the test can say why, instead of hanging.

Not covered: streaming, parallel requests to one script (they are served one at a time,
in order).
"""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Reply:
    """One assistant turn. ``calls`` are (tool name, arguments); arguments given as a str
    are sent verbatim (malformed JSON, for tests) on the OpenAI endpoint."""

    text: str = ""
    calls: list[tuple[str, dict[str, Any] | str]] = field(default_factory=list)
    input_tokens: int = 100
    output_tokens: int = 20
    stop: str | None = None


@dataclass
class HttpError:
    status: int
    message: str = "error"
    headers: dict[str, str] = field(default_factory=dict)
    code: str | None = None


@dataclass
class Request:
    """What the agent sent: the endpoint's path, its JSON body and its headers."""

    path: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def api(self) -> str:
        return "anthropic" if self.path.endswith("/messages") else "openai"

    def tool_outputs(self) -> list[str]:
        """Every tool result in the conversation, oldest first, in either format."""
        out: list[str] = []
        for m in self.body.get("messages", []):
            if m.get("role") == "tool":
                out.append(_text(m.get("content")))
            elif m.get("role") == "user" and isinstance(m.get("content"), list):
                for b in m["content"]:
                    if b.get("type") == "tool_result":
                        out.append(_text(b.get("content")))
        return out

    def last_tool_output(self) -> str:
        outs = self.tool_outputs()
        return outs[-1] if outs else ""

    def user_texts(self) -> list[str]:
        out = []
        for m in self.body.get("messages", []):
            if m.get("role") != "user":
                continue
            c = m.get("content")
            if isinstance(c, str):
                out.append(c)
            elif isinstance(c, list):
                out += [b.get("text", "") for b in c if b.get("type") == "text"]
        return out

    def system(self) -> str:
        if self.api == "anthropic":
            return _text(self.body.get("system"))
        msgs = self.body.get("messages", [])
        return _text(msgs[0].get("content")) if msgs and msgs[0].get("role") == "system" \
            else ""


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return "" if content is None else str(content)


ScriptItem = Reply | HttpError | Callable[[Request], "Reply | HttpError"]


class ScriptedServer:
    """``with ScriptedServer([...]) as s:`` then point a client at ``s.base_url``."""

    def __init__(self, script: list[ScriptItem], max_body: int | None = None) -> None:
        self.script = list(script)
        self.requests: list[Request] = []
        self.exhausted = False
        self.errors: list[str] = []  # checks inside script functions that failed
        self.max_body = max_body  # bodies longer than this get a context-length error
        self._lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:  # keep test output quiet
                pass

            def do_POST(self) -> None:
                n = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(n)
                req = Request(self.path, json.loads(raw or b"{}"), dict(self.headers))
                status, body, headers = server._answer(req, len(raw))
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        """For OpenAI clients (``/v1`` included); Anthropic clients take ``root_url``."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def __enter__(self) -> ScriptedServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    @property
    def remaining(self) -> int:
        return len(self.script)

    # -- answering ----------------------------------------------------------------------
    def _answer(self, req: Request, size: int) -> tuple[int, dict, dict[str, str]]:
        with self._lock:
            self.requests.append(req)
            if self.max_body is not None and size > self.max_body:
                return _error(req.api, HttpError(
                    400, f"This model's maximum context length is {self.max_body // 4} "
                    f"tokens. However, your messages resulted in {size // 4} tokens.",
                    code="context_length_exceeded"))
            if not self.script:
                self.exhausted = True
                return _error(req.api, HttpError(400, "loopback script exhausted"))
            item = self.script.pop(0)
        if callable(item):
            try:
                item = item(req)
            except Exception as e:  # a failed check in a script: fail the test, not the thread
                self.errors.append(f"{type(e).__name__}: {e}")
                return _error(req.api, HttpError(400, f"loopback script check failed: {e}"))
        if isinstance(item, HttpError):
            return _error(req.api, item)
        return 200, (_anthropic(item, req) if req.api == "anthropic" else _openai(item, req)), {}


def _error(api: str, e: HttpError) -> tuple[int, dict, dict[str, str]]:
    if api == "anthropic":
        kind = {429: "rate_limit_error", 500: "api_error", 529: "overloaded_error"}.get(
            e.status, "invalid_request_error")
        body = {"type": "error", "error": {"type": kind, "message": e.message}}
    else:
        body = {"error": {"message": e.message, "type": "server_error" if e.status >= 500
                          else "invalid_request_error", "code": e.code}}
    return e.status, body, dict(e.headers)


def _openai(r: Reply, req: Request) -> dict[str, Any]:
    calls = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
              "function": {"name": name,
                           "arguments": args if isinstance(args, str) else json.dumps(args)}}
             for name, args in r.calls]
    msg: dict[str, Any] = {"role": "assistant", "content": r.text or None}
    if calls:
        msg["tool_calls"] = calls
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion",
        "created": 0, "model": req.body.get("model", "scripted"),
        "choices": [{"index": 0, "message": msg,
                     "finish_reason": r.stop or ("tool_calls" if calls else "stop")}],
        "usage": {"prompt_tokens": r.input_tokens, "completion_tokens": r.output_tokens,
                  "total_tokens": r.input_tokens + r.output_tokens},
    }


def _anthropic(r: Reply, req: Request) -> dict[str, Any]:
    content: list[dict[str, Any]] = []
    if r.text:
        content.append({"type": "text", "text": r.text})
    for name, args in r.calls:
        if isinstance(args, str):  # Anthropic sends parsed objects; keep the string as one
            args = {"raw": args}
        content.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:12]}",
                        "name": name, "input": args})
    return {
        "id": f"msg_{uuid.uuid4().hex[:12]}", "type": "message", "role": "assistant",
        "model": req.body.get("model", "scripted"), "content": content,
        "stop_reason": r.stop or ("tool_use" if r.calls else "end_turn"),
        "stop_sequence": None,
        "usage": {"input_tokens": r.input_tokens, "output_tokens": r.output_tokens},
    }
