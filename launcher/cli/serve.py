"""`dfm serve MODEL --local [--port N]` and `dfm serve --check MODEL`: an exported model (a local run's folder, a
SavedModel folder or a model.tar.gz) served on a loopback port as SageMaker's TensorFlow inference container serves
it, or its layout and signatures checked offline with an example request. Through `backends` (kind serving)."""

from __future__ import annotations

import json
from pathlib import Path

import click

from launcher.cli.options import OUTPUT
from launcher.errors import DfmError


@click.command()
@click.argument("model", type=click.Path(path_type=Path))
@click.option("--local", is_flag=True, help="Serve on this machine (127.0.0.1), as the container would.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any free port.")
@click.option(
    "--check", is_flag=True, help="Offline: check the layout and signatures, print what a request must look like."
)
@OUTPUT
def serve(model: Path, local: bool, port: int, check: bool, output: str) -> None:
    """Serve MODEL (a local run's folder, a SavedModel folder or a model.tar.gz) with SageMaker's TensorFlow
    Serving contract: /ping, /invocations and TF Serving's /v1/models/<name>:predict."""
    from launcher.backends import backend_for
    from launcher.serving.artifact import ServePlan
    from launcher.serving.check import text

    if not (local or check):
        raise DfmError("dfm serve answers on this machine only so far: add --local (or --check to check MODEL offline)")
    backend = backend_for("serving", "local")
    request = backend.dryrun(ServePlan(model, port))
    try:
        if check:
            document = backend.document(request)
            click.echo(json.dumps(document, indent=2) if output == "json" else text(document))
        else:
            backend.execute(request, echo=click.echo)
    finally:
        request.close()


COMMANDS = (serve,)
