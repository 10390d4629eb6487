"""`dfm transform MODEL --local`: local files scored as a batch transform job scores S3 objects, through the local
server (SageMaker's front over the loaded model on a loopback port): each file split by line (`SplitType: Line`),
sent to `/invocations` one record a request (SingleRecord) or as many lines as fit in `max_payload` MB
(MultiRecord), each response a line of `<file>.out` (AssembleWith: Line). With SingleRecord that is one output line
per input line, as on SageMaker; with MultiRecord one per request, as on SageMaker too."""

from __future__ import annotations

import threading
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator

from launcher.errors import DfmError
from launcher.serving import handlers
from launcher.serving.artifact import ServePlan
from launcher.serving.check import ServeRequest, build_request
from launcher.serving.model import LoadedModels
from launcher.serving.server import build_app, listen

OUT_SUFFIX = ".out"  # what a transform job names the output of each input object


@dataclass(frozen=True)
class LocalTransformPlan:
    model: Path
    data: Path  # a file, or a folder whose files are scored (as an S3 prefix's objects)
    output_path: Path | None  # None: each `<file>.out` beside its file
    content_type: str
    strategy: str
    max_payload: int  # MB


@dataclass(frozen=True)
class LocalTransformRequest:
    plan: LocalTransformPlan
    serve: ServeRequest
    files: tuple[tuple[Path, Path], ...]  # (input, output)

    def close(self) -> None:
        self.serve.close()

    def document(self) -> dict[str, Any]:
        from launcher.serving.check import document

        return {
            "kind": "transform",
            "backend": "local",
            "model": document(self.serve),
            "content_type": self.plan.content_type,
            "split_type": "Line",
            "strategy": self.plan.strategy,
            "max_payload_mb": self.plan.max_payload,
            "files": [{"input": str(i), "output": str(o)} for i, o in self.files],
        }


def build(plan: LocalTransformPlan) -> LocalTransformRequest:
    """The model laid out and its signatures read (a layout the container refuses is refused), the files listed."""
    if not plan.data.exists():
        raise DfmError(f"--data {plan.data}: no such file or folder")
    if plan.data.is_dir():
        inputs = sorted(p for p in plan.data.rglob("*") if p.is_file() and not p.name.endswith(OUT_SUFFIX))
        if plan.output_path is not None:
            outputs = [plan.output_path / (p.relative_to(plan.data).as_posix() + OUT_SUFFIX) for p in inputs]
        else:
            outputs = [p.with_name(p.name + OUT_SUFFIX) for p in inputs]
    else:
        inputs = [plan.data]
        folder = plan.output_path if plan.output_path is not None else plan.data.parent
        outputs = [folder / (plan.data.name + OUT_SUFFIX)]
    if not inputs:
        raise DfmError(f"--data {plan.data}: no files to score")
    serve = build_request(ServePlan(plan.model, 0))
    return LocalTransformRequest(plan, serve, tuple(zip(inputs, outputs)))


def _records(path: Path, strategy: str, max_payload: int) -> Iterator[bytes]:
    """The file's non-empty lines, one a request (SingleRecord) or as many as fit in max_payload MB."""
    limit = max_payload * 1024 * 1024
    batch: list[bytes] = []
    size = 0
    with path.open("rb") as lines:
        for line in lines:
            record = line.rstrip(b"\r\n")
            if not record.strip():
                continue
            if len(record) > limit:
                raise DfmError(f"{path}: a line of {len(record)} bytes is over --max-payload {max_payload} MB", 1)
            if strategy == "SingleRecord":
                yield record
                continue
            if batch and size + len(record) + 1 > limit:
                yield b"\n".join(batch)
                batch, size = [], 0
            batch.append(record)
            size += len(record) + 1
    if batch:
        yield b"\n".join(batch)


def _invoke(url: str, body: bytes, content_type: str, where: str) -> bytes:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type})
    try:
        with urllib.request.urlopen(request, timeout=600) as response:
            return response.read()
    except urllib.error.HTTPError as err:
        detail = " ".join(err.read().decode("utf-8", "replace").split())[:300]
        raise DfmError(f"{where}: the model answered {err.code}: {detail}", 1) from None


def run(request: LocalTransformRequest, echo: Callable[[str], None]) -> dict[str, int]:
    """Scores every file through the local server; -> output lines per input file."""
    import uvicorn

    serve = request.serve
    models = LoadedModels(serve.artifact, serve.described)
    sock = listen("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = build_app(models, handlers.load(serve.artifact.root), url)
    config = uvicorn.Config(app, log_config=None, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)  # log_config None: the logging of the command that runs it is left as it is
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    written: dict[str, int] = {}
    try:
        for source, target in request.files:
            target.parent.mkdir(parents=True, exist_ok=True)
            partial = target.with_name(target.name + ".partial")
            count = 0
            try:
                with partial.open("wb") as out:
                    for number, body in enumerate(_records(source, request.plan.strategy, request.plan.max_payload), 1):
                        answer = _invoke(
                            url + "/invocations", body, request.plan.content_type, f"{source} request {number}"
                        )
                        out.write(answer.rstrip(b"\n") + b"\n")
                        count += 1
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            partial.replace(target)
            written[str(target)] = count
            echo(f"{source} -> {target} ({count} lines)")
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
    return written
