"""The local server: SageMaker's front (`/ping`, `/invocations`) and TensorFlow Serving's REST routes
(`/v1/models/<name>[/versions/<n>]` status, `/metadata`, `:predict`) on a loopback port, over the loaded models.
Starlette routes, uvicorn serves; SIGINT / SIGTERM stop it gracefully, nothing left running."""

from __future__ import annotations

import re
import signal
import socket
from typing import Callable

from launcher.errors import DfmError
from launcher.serving import contract, handlers, rest
from launcher.serving.check import ServeRequest
from launcher.serving.handlers import Handler
from launcher.serving.model import LoadedModels

TFS_PATH = re.compile(
    r"^/v1/models/(?P<name>[^/:]+)(?:/versions/(?P<version>[^/:]+))?(?:(?P<metadata>/metadata)|:(?P<method>[a-z]+))?$"
)


def build_app(models: LoadedModels, handler: Handler | None = None, base_url: str = ""):
    """The ASGI application answering the container's routes for `models`; `/invocations` through `handler`
    (code/inference.py's, whose `context.rest_uri` is under `base_url`) when there is one."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route

    def answer(status: int, doc) -> Response:
        return Response(rest.dumps(doc), status_code=status, media_type="application/json")

    def failed(err: contract.ServingError) -> Response:
        return answer(err.status, err.body())

    def ping(request: Request) -> Response:
        return Response(status_code=200 if models.default in models.described else 502)

    async def invocations(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        raw = await request.body()
        try:
            route = contract.invocation_route(request.headers.get(contract.CUSTOM_ATTRIBUTES), models.default)
            if handler is not None:
                context = handlers.context_for(route, base_url, request.headers, raw)
                status, reply, media = await run_in_threadpool(handlers.invoke, handler, context, raw)
                return Response(reply, status_code=status, media_type=media)
            tfs_body = contract.front_body(request.headers.get("content-type"), raw.decode("utf-8", "replace"))
        except contract.ServingError as err:
            return failed(err)
        return await _in_thread(lambda: _predict(models, route, tfs_body))

    async def tfs(request: Request) -> Response:
        match = TFS_PATH.match(request.url.path)
        if not match or (request.method == "POST") != bool(match["method"]):  # POST :method, GET status/metadata
            return failed(contract.invalid(f"Malformed request: {request.method} {request.url.path}"))
        version = match["version"]
        if version is not None and not version.isdigit():
            return failed(contract.invalid(f"Malformed request: {request.method} {request.url.path}"))
        number = int(version) if version is not None else None
        if match["method"]:
            if match["method"] not in contract.METHODS:
                return failed(contract.invalid(f"Malformed request: {request.method} {request.url.path}"))
            body = (await request.body()).decode("utf-8", "replace")
            route = contract.Route(match["name"], number, match["method"])
            return await _in_thread(lambda: _predict(models, route, body))
        try:
            served = models.version_of(match["name"], number)
        except contract.ServingError as err:
            return failed(err)
        if match["metadata"]:
            defs = models.described[match["name"]][served].signature_defs
            return answer(
                200,
                {
                    "model_spec": {"name": match["name"], "signature_name": "", "version": str(served)},
                    "metadata": {"signature_def": {"signature_def": defs}},
                },
            )
        versions = [served] if number is not None else sorted(models.described[match["name"]], reverse=True)
        status = {"error_code": "OK", "error_message": ""}
        return answer(
            200,
            {"model_version_status": [{"version": str(v), "state": "AVAILABLE", "status": status} for v in versions]},
        )

    async def _in_thread(work: Callable[[], tuple[int, dict]]) -> Response:
        from starlette.concurrency import run_in_threadpool

        status, doc = await run_in_threadpool(work)
        return answer(status, doc)

    return Starlette(
        routes=[
            Route("/ping", ping, methods=["GET"]),
            Route("/invocations", invocations, methods=["POST"]),
            Route("/v1/{rest:path}", tfs, methods=["GET", "POST"]),
        ]
    )


def _predict(models: LoadedModels, route: contract.Route, body: str) -> tuple[int, dict]:
    try:
        return 200, models.predict(route, body)
    except contract.ServingError as err:
        return err.status, err.body()


def listen(host: str, port: int) -> socket.socket:
    """A listening loopback socket: connections wait in its backlog until the server takes them. Its protocol is
    named TCP: asyncio turns Nagle's algorithm off (TCP_NODELAY) only on connections of such a socket, and without
    that a kept-alive client waits out a delayed ACK (~40 ms) for each answer's body."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as err:
        sock.close()
        raise DfmError(f"cannot listen on {host}:{port} ({err.strerror}); choose another port with --port", 1) from None
    sock.listen(128)
    return sock


def serve(request: ServeRequest, echo: Callable[[str], None]) -> None:
    """Loads every version, listens on the plan's loopback port and answers until SIGINT or SIGTERM."""
    import uvicorn

    handler = handlers.load(request.artifact.root)
    models = LoadedModels(request.artifact, request.described)
    sock = listen(request.plan.host, request.plan.port)
    host, port = sock.getsockname()[:2]
    config = uvicorn.Config(
        build_app(models, handler, f"http://{host}:{port}"),
        log_level="warning",
        access_log=False,
        lifespan="off",
        timeout_graceful_shutdown=5,
    )
    server = uvicorn.Server(config)

    def stop(_number, _frame) -> None:  # a signal before uvicorn's handlers are in (or after): stop all the same
        server.should_exit = True

    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        name = models.default
        if handler is not None:
            echo("code/inference.py: its handlers answer /invocations (code/requirements.txt is not installed)")
        echo(
            f"serving {name!r} (versions {', '.join(str(v) for v in sorted(models.described[name]))}) on "
            f"http://{host}:{port}: /ping, /invocations, /v1/models/{name}:predict; Ctrl-C stops"
        )
        server.run(sockets=[sock])
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        sock.close()
    echo("stopped")
