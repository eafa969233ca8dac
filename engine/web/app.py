"""The what-if page's HTTP app (Starlette): the page, its static files and a JSON API.

Units: the API's numbers are summary.json's (seconds, bytes); request bodies are limited
in bytes (``MAX_BODY_BYTES``).

Why Starlette: a small, well-kept ASGI toolkit (routing, requests, responses, a test
client) without a framework's weight; uvicorn serves it. Both import only here and in
the serve-web command, never on a simulating command's path.

Safety (issue 30): the server answers only requests addressed to the host it listens on
(the Host header: DNS rebinding) and, when a browser sends an Origin, only from that same
origin (another site's page cannot drive it); it serves only the files of its own static
folder, by exact name; a body over ``MAX_BODY_BYTES`` or not JSON is refused with one
line; bad plans get the CLI's own one-line message; and any other failure is one line on
the page with the traceback only on the server's stderr.
"""
from __future__ import annotations

import ipaddress
import json
import traceback
from collections.abc import Mapping
from importlib import resources
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from engine.web.port import PlanPort, error_line
from engine.web.search_job import SearchRunner
from workload_gen.core.errors import TrainsimError

MAX_BODY_BYTES = 1 << 20
"""1 MiB: a plan is under 1 KB and the largest Hugging Face config.json we know (DeepSeek-V3's)
about 2 KB; anything bigger is not a plan."""

STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8"}
"""The static folder's file kinds and their content types; no other file is served."""

LOCAL_NAMES = ("127.0.0.1", "localhost", "[::1]")

PAGE_HEADERS = {
    # the page loads scripts, styles and data from this server only (it works offline, and an
    # injected tag could load nothing), and no other site may frame it
    "Content-Security-Policy": "default-src 'self'; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
}


class BadRequest(Exception):
    """A request the page should not have sent (its one line goes back with status 400)."""


class HostCheck:
    """Which Host header values the server answers (and so which Origins it takes).

    Bound to one address: that address, and the loopback names when it is a loopback
    address. Bound to every interface (0.0.0.0, ::), which the user asks for to share the
    page: any IP literal on the port, and this machine's own names. A DNS-rebinding page
    reaches the server under its attacker's domain name, which is never accepted."""

    def __init__(self, host: str, port: int) -> None:
        import socket

        self.port = port
        names = {host if ":" not in host else f"[{host}]"}
        if host in ("127.0.0.1", "localhost", "::1"):
            names.update(LOCAL_NAMES)
        self.exact = frozenset(f"{n}:{port}" for n in names)
        self.wildcard = host in ("0.0.0.0", "::", "")
        self.machine = frozenset({"localhost", socket.gethostname().lower(), socket.getfqdn().lower()})

    def host(self, value: str | None) -> bool:
        if value is None:
            return False
        if value.lower() in self.exact:
            return True
        name, _, port = value.rpartition(":")
        if not self.wildcard or port != str(self.port):
            return False
        try:
            ipaddress.ip_address(name.strip("[]"))
            return True
        except ValueError:
            return name.lower() in self.machine

    def origin(self, value: str) -> bool:
        return value.startswith("http://") and self.host(value[len("http://"):])

    def describe(self) -> str:
        return ", ".join(sorted(self.exact)) + (f", or any address of this machine on port {self.port}"
                                                 if self.wildcard else "")


def _static_files() -> dict[str, tuple[bytes, str]]:
    """Every file of the static folder, read once: the server never opens a path a request names."""
    folder = resources.files("engine.web") / "static"
    files = {}
    for entry in folder.iterdir():
        kind = STATIC_TYPES.get("." + entry.name.rsplit(".", 1)[-1])
        if entry.is_file() and kind:
            files[entry.name] = (entry.read_bytes(), kind)
    return files


def _error(message: str, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _json_body(request: Request) -> Any:
    declared = request.headers.get("content-length")
    if declared is not None and (not declared.isdigit() or int(declared) > MAX_BODY_BYTES):
        raise BadRequest(f"error: request body of {declared} bytes is invalid; at most {MAX_BODY_BYTES} bytes")
    body = bytearray()
    async for chunk in request.stream():
        body += chunk
        if len(body) > MAX_BODY_BYTES:
            raise BadRequest(f"error: request body is over {MAX_BODY_BYTES} bytes")
    try:
        return json.loads(body.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as exc:
        raise BadRequest(f"error: request body is not JSON ({str(exc).splitlines()[0][:120]})") from None


def _plan_of(body: Any) -> Mapping[str, Any]:
    plan = body.get("plan") if isinstance(body, dict) else None
    if not isinstance(plan, dict):
        raise BadRequest('error: request body must be {"plan": {...form fields...}}')
    return plan


def create_app(port: PlanPort, host: str = "127.0.0.1", listen_port: int = 8000) -> Starlette:
    """The app for a server listening on ``host:listen_port`` (the Host/Origin checks use them)."""
    static = _static_files()
    check = HostCheck(host, listen_port)
    searches = SearchRunner(port.search)

    async def call(func, *args) -> JSONResponse:
        try:
            return JSONResponse(await run_in_threadpool(func, *args))
        except TrainsimError as exc:
            # the CLI's verdict on a well-formed request: an answer (200), not a failed request
            # (which the browser would log as a console error on every half-typed plan)
            return _error(error_line(exc), 200)
        except RecursionError:
            return _error("error: input nested too deeply")
        except Exception as exc:  # a bug: one line for the page, the traceback for the server log
            traceback.print_exc()
            return _error(f"internal error: {type(exc).__name__}: {exc}", 500)

    async def page(request: Request) -> Response:
        body, kind = static["index.html"]
        return Response(body, media_type=kind, headers={"Cache-Control": "no-store", **PAGE_HEADERS})

    async def static_file(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in static:
            return Response("not found\n", status_code=404, media_type="text/plain")
        body, kind = static[name]
        return Response(body, media_type=kind, headers={"X-Content-Type-Options": "nosniff"})

    async def meta(request: Request) -> JSONResponse:
        return await call(port.meta)

    async def evaluate(request: Request) -> JSONResponse:
        return await call(port.evaluate, _plan_of(await _json_body(request)))

    async def flags(request: Request) -> JSONResponse:
        body = await _json_body(request)
        text = body.get("text") if isinstance(body, dict) else None
        if not isinstance(text, str):
            raise BadRequest('error: request body must be {"text": "...flags..."}')
        return await call(port.parse_flags, text)

    async def search(request: Request) -> JSONResponse:
        if request.method == "GET":
            return JSONResponse(searches.view())
        if request.method == "DELETE":
            return JSONResponse({"cancelled": searches.cancel()})
        plan = _plan_of(await _json_body(request))
        if not searches.start(plan):
            return _error("error: a search is already running; cancel it or wait for it (one at a time)", 409)
        return JSONResponse(searches.view())

    async def no_icon(request: Request) -> Response:
        return Response(status_code=204)  # the browser asks for one; the page has none

    routes = [Route("/", page), Route("/static/{name}", static_file), Route("/favicon.ico", no_icon),
              Route("/api/meta", meta),
              Route("/api/evaluate", evaluate, methods=["POST"]), Route("/api/flags", flags, methods=["POST"]),
              Route("/api/search", search, methods=["GET", "POST", "DELETE"])]

    async def bad_request(request: Request, exc: Exception) -> JSONResponse:
        return _error(str(exc))

    app = Starlette(routes=routes, exception_handlers={BadRequest: bad_request},
                    middleware=[Middleware(HostOriginGuard, check=check)])
    app.state.searches = searches
    return app


class HostOriginGuard:
    """ASGI middleware run before routing: refuse (403, one line) a request whose Host is
    not this server or whose Origin, when a browser sends one, is another site."""

    def __init__(self, app: Any, check: HostCheck) -> None:
        self.app, self.check = app, check

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
            host, origin = headers.get("host"), headers.get("origin")
            reason = None
            if not self.check.host(host):
                reason = f"error: Host {host!r} is not this server (valid: {self.check.describe()})"
            elif origin is not None and not self.check.origin(origin):
                reason = (f"error: Origin {origin!r} may not use this server "
                          f"(valid: http:// and {self.check.describe()})")
            if reason:
                await _error(reason, 403)(scope, receive, send)
                return
        await self.app(scope, receive, send)
