"""The live dashboard: the report's page served on loopback while a run goes.

Routes (GET only; any other method is refused with 405, so nothing can change the run):

- ``/``: the report page (``page.render(view, live=True)``), built from the ledger as it
  is now; its script polls ``/api/progress`` and swaps in a fresh page when that changed.
- ``/api/progress``: status, evaluations, problems per state, passed, the geomean.
- ``/api/view``: the summary and per problem its state, verdict and speedups (JSON).
- ``/plotly.js``: the plotting library, served from the installed package.

Every request opens the ledger afresh and read-only (``Ledger(readonly=True)``: SQLite
refuses writes); a page is rebuilt only when the ledger's files changed since the last one.
Bound to 127.0.0.1 unless told otherwise.

Not covered: authentication (loopback only is the protection; binding another address
exposes sources and records to whoever reaches it), pushing updates (the page polls), runs
in archives that change (a ``.tgz`` is a snapshot).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Route

from solforge.orchestrate.locate import Located
from solforge.report.page import render
from solforge.report.view import RunView, build_view


class _Cache:
    """The last view and page, keyed by the ledger files' sizes and times."""

    def __init__(self, located: Located, profile: Path | None, poll_ms: int) -> None:
        self.located, self.profile, self.poll_ms = located, profile, poll_ms
        self.lock = threading.Lock()
        self.key: Any = None
        self.view: RunView | None = None
        self.page: str | None = None

    def _stamp(self) -> Any:
        d = self.located.run_dir or self.located.export_dir
        assert d is not None
        out = []
        for name in ("ledger.sqlite", "ledger.sqlite-wal"):
            try:
                st = os.stat(d / name)
                out.append((name, st.st_size, st.st_mtime_ns))
            except FileNotFoundError:
                pass
        return tuple(out)

    def current(self) -> RunView:
        with self.lock:
            key = self._stamp()
            if self.view is None or key != self.key:
                self.view, self.page, self.key = build_view(self.located, self.profile), \
                    None, key
            return self.view

    def html(self) -> str:
        view = self.current()
        with self.lock:
            if self.page is None:
                self.page = render(view, live=True, poll_ms=self.poll_ms)
            return self.page


def create_app(located: Located, profile: Path | None = None, poll_ms: int = 2000
               ) -> Starlette:
    """The dashboard's ASGI app for one located run."""
    cache = _Cache(located, profile, poll_ms)
    from plotly.offline import get_plotlyjs

    plotly_js = get_plotlyjs()

    async def index(request: Request) -> Response:
        return HTMLResponse(cache.html(), headers={"Cache-Control": "no-store"})

    async def progress(request: Request) -> Response:
        return JSONResponse(cache.current().progress(), headers={"Cache-Control": "no-store"})

    async def view(request: Request) -> Response:
        v = cache.current()
        problems = [{"name": p.name, "state": p.state, "kept": p.kept,
                     "status": p.record.status.value if p.record else None,
                     "speedup_vs_best": p.speedup_vs_best,
                     "sol_score": p.record.sol_score if p.record and p.kept else None}
                    for p in v.problems]
        return JSONResponse({"title": v.title, "progress": v.progress(), "summary": v.summary,
                             "problems": problems})

    async def plotly(request: Request) -> Response:
        return Response(plotly_js, media_type="application/javascript",
                        headers={"Cache-Control": "max-age=3600"})

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)  # browsers ask; a 404 would be a console error

    return Starlette(routes=[Route("/", index), Route("/api/progress", progress),
                             Route("/api/view", view), Route("/plotly.js", plotly),
                             Route("/favicon.ico", no_icon)])


def serve(located: Located, host: str = "127.0.0.1", port: int = 8765,
          profile: Path | None = None, poll_ms: int = 2000) -> None:
    """Serve the dashboard until interrupted (Ctrl-C)."""
    import uvicorn

    uvicorn.run(create_app(located, profile, poll_ms), host=host, port=port,
                log_level="warning")
