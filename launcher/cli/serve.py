"""`dfm serve MODEL --local [--port N]` and `dfm serve --check MODEL`: an exported model (a local run's folder, a
SavedModel folder or a model.tar.gz) served on a loopback port as SageMaker's TensorFlow inference container serves
it, or its layout and signatures checked offline with an example request. Through `backends` (kind serving)."""

from __future__ import annotations

import json

import click

from launcher.cli.options import OUTPUT, REGION
from launcher.errors import DfmError


@click.command()
@click.argument("model")
@REGION
@click.option("--local", is_flag=True, help="Serve on this machine (127.0.0.1), as the container would.")
@click.option("--port", type=click.IntRange(0, 65535), default=8080, show_default=True, help="0: any free port.")
@click.option(
    "--check", is_flag=True, help="Offline: check the layout and signatures, print what a request must look like."
)
@OUTPUT
def serve(model: str, region: str | None, local: bool, port: int, check: bool, output: str) -> None:
    """Serve MODEL (a local run's folder, a SavedModel folder, a model.tar.gz, a training job's name or an s3://
    model.tar.gz, downloaded first) with SageMaker's TensorFlow Serving contract: /ping, /invocations and TF
    Serving's /v1/models/<name>:predict."""
    from launcher.backends import backend_for
    from launcher.serving.artifact import ServePlan
    from launcher.serving.check import text

    if not (local or check):
        raise DfmError("dfm serve answers on this machine only so far: add --local (or --check to check MODEL offline)")
    backend = backend_for("serving", "local")
    request = backend.dryrun(ServePlan(model, port, region=region))
    try:
        if check:
            document = backend.document(request)
            click.echo(json.dumps(document, indent=2) if output == "json" else text(document))
        else:
            backend.execute(request, echo=click.echo)
    finally:
        request.close()


COMMANDS = (serve,)
