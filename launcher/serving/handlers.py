"""`code/inference.py` at the artifact's root, run as the container's Python service runs it: `handler(data,
context)`, or `input_handler(data, context)` -> a POST of its result to TensorFlow Serving's REST predict ->
`output_handler(response, context)`; each answers `(body, content_type)`. `data` is the request body as a stream,
`context` the container's (`rest_uri` is this server's own TF Serving route). A handler's exception: 500
`{"error": ...}`. `code/lib` joins the import path; `code/requirements.txt` is not installed."""

from __future__ import annotations

import importlib.util
import io
import json
import sys
from collections import namedtuple
from pathlib import Path
from typing import Callable

from launcher.errors import DfmError
from launcher.serving import contract

Context = namedtuple(
    "Context",
    "model_name, model_version, method, rest_uri, grpc_port, channel, custom_attributes, request_content_type, "
    "accept_header, content_length",
)
Handler = Callable[[io.BytesIO, Context], tuple]


def load(root: Path) -> Handler | None:
    """The handler `root/code/inference.py` defines (None without one); one that does not import, or defines
    neither form, is one line, exit 1."""
    script = root / "code" / "inference.py"
    if not script.is_file():
        return None
    lib = root / "code" / "lib"
    if lib.is_dir() and str(lib) not in sys.path:
        sys.path.append(str(lib))
    spec = importlib.util.spec_from_file_location("inference", script)
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as err:  # noqa: BLE001 (the user's script may raise anything)
        raise DfmError(f"{script}: cannot import it ({type(err).__name__}: {err})", 1) from None
    if hasattr(module, "handler"):
        return module.handler
    if hasattr(module, "input_handler") and hasattr(module, "output_handler"):
        return _composed(module.input_handler, module.output_handler)
    raise DfmError(
        f"{script}: Handlers are not implemented correctly in user script. (define handler(data, context), or "
        "input_handler(data, context) and output_handler(response, context))",
        1,
    )


def _composed(input_handler, output_handler) -> Handler:
    def handler(data, context):
        import requests

        response = requests.post(context.rest_uri, data=input_handler(data, context), timeout=600)
        return output_handler(response, context)

    return handler


def context_for(route: contract.Route, base_url: str, headers, body: bytes) -> Context:
    uri = f"{base_url}/v1/models/{route.model}"
    if route.version is not None:
        uri += f"/versions/{route.version}"
    uri += f":{route.method}"
    return Context(
        route.model,
        str(route.version) if route.version is not None else None,
        route.method,
        uri,
        None,
        None,
        headers.get(contract.CUSTOM_ATTRIBUTES),
        headers.get("content-type") or "application/json",
        headers.get("accept") or "application/json",
        len(body),
    )


def invoke(handler: Handler, context: Context, body: bytes) -> tuple[int, bytes, str]:
    """-> (status, body, content type) of one invocation through the user's handler."""
    try:
        answer, content_type = handler(io.BytesIO(body), context)
    except Exception as err:  # noqa: BLE001 (the container answers any handler error with 500)
        return 500, json.dumps({"error": str(err)}).encode(), "application/json"
    if isinstance(answer, str):
        answer = answer.encode()
    return 200, bytes(answer), content_type or "application/json"
