"""Item: the local server (`dfm serve MODEL --local`, SageMaker's front over the loaded SavedModel) against calling
the loaded model directly: requests/s and p50/p99 latency at 1 and 64 rows per request, the demo's model (the
bundled export, 39 fields, 117,581 ids, MLP 64-32). The gap is the front's overhead: HTTP, JSON parsing of
`instances` into arrays, JSON of the answer.

The server is `dfm serve` itself, in a process of its own (its port read from the line it prints once it listens);
the client sends one request after another on one kept-alive connection, so latency is the server's and throughput
is one client's. Direct calls run in this process, with the arrays built once (what the server does per request is
what the gap shows).
"""

from __future__ import annotations

import http.client
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.common import REPO, add_table, alternate, fmt, median, quiet_tensorflow, section, use_entrypoints, verdict

ROWS = (1, 64)
OVERHEAD_GOAL_MS = 10.0


def _export(folder: Path) -> Path:
    quiet_tensorflow()
    use_entrypoints()
    import deepfm_checkpoint as C
    import deepfm_hparams as H
    import deepfm_training as T

    hp = H.parse_hyperparameters([])  # the bundled defaults: the demo's model
    trainer = T.build_trainer(hp)
    C.export_saved_model(trainer.model, hp, str(folder / "model"), version=1)
    return folder / "model"


def _rows(count: int, seed: int, fields: int = 39, ids: int = 117_581) -> tuple[list, list]:
    rng = np.random.default_rng(seed)
    return rng.integers(0, ids, (count, fields)).tolist(), rng.uniform(0, 1, (count, fields)).round(4).tolist()


def _start_server(model: Path) -> tuple[subprocess.Popen, int]:
    """`dfm serve MODEL --local --port 0`; -> (process, port) once it prints that it listens."""
    server = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "serve", str(model), "--local", "--port", "0"],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert server.stdout is not None
    for line in server.stdout:
        found = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
        if found:
            return server, int(found[1])
    server.wait()
    raise RuntimeError(f"dfm serve ended before listening (exit {server.returncode})")


def _timed_calls(call, requests: int) -> dict:
    call()  # warm up (a first call traces the signature's function)
    latencies = []
    start = time.perf_counter()
    for _ in range(requests):
        began = time.perf_counter()
        call()
        latencies.append(time.perf_counter() - began)
    wall = time.perf_counter() - start
    return {
        "per_s": requests / wall,
        "p50_ms": float(np.percentile(latencies, 50) * 1000),
        "p99_ms": float(np.percentile(latencies, 99) * 1000),
    }


def measure(quick: bool, context: dict) -> dict:
    import tensorflow as tf

    repetitions = context.get("repetitions") or (3 if quick else 5)
    requests = 200 if quick else 1000
    result = section(
        "Local serving: the front against the model itself",
        f"the front (HTTP, JSON in and out) adds at most {OVERHEAD_GOAL_MS:g} ms per request at p50, at 1 and 64 rows",
        f"`bench/serving.py`: `dfm serve MODEL --local` of the bundled export with the defaults (the demo's model), "
        f"{requests} requests per run on one kept-alive connection, JSON `instances`, against the loaded "
        "`serving_default` called with the same rows",
    )
    with tempfile.TemporaryDirectory(prefix="dfm-bench-serving-") as tmp:
        model = _export(Path(tmp))
        serve = tf.saved_model.load(str(model / "1")).signatures["serving_default"]
        server, port = _start_server(model)
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=120)
            contenders = {}
            for rows in ROWS:
                ids, vals = _rows(rows, seed=rows)
                body = json.dumps({"instances": [{"feat_ids": i, "feat_vals": v} for i, v in zip(ids, vals)]})
                tensors = {"feat_ids": tf.constant(ids, tf.int64), "feat_vals": tf.constant(vals, tf.float32)}

                def direct(tensors=tensors):
                    return {k: v.numpy() for k, v in serve(**tensors).items()}

                def front(body=body, rows=rows):
                    connection.request("POST", "/invocations", body, {"Content-Type": "application/json"})
                    answer = connection.getresponse()
                    payload = answer.read()
                    if answer.status != 200 or len(json.loads(payload)["predictions"]) != rows:
                        raise RuntimeError(f"the server answered {answer.status}: {payload[:200]!r}")

                contenders[f"{rows} rows: model called directly"] = lambda f=direct: _timed_calls(f, requests)
                contenders[f"{rows} rows: dfm serve --local (/invocations)"] = lambda f=front: _timed_calls(f, requests)
            runs = alternate(contenders, repetitions)
            connection.close()
        finally:
            server.terminate()
            server.wait(timeout=60)
    table, data = [], {}
    for name, measured in runs.items():
        figures = {key: median([m[key] for m in measured]) for key in ("per_s", "p50_ms", "p99_ms")}
        data[name] = figures
        table.append([name, fmt(figures["per_s"], 1), fmt(figures["p50_ms"], 2), fmt(figures["p99_ms"], 2)])
    add_table(
        result, ["contender", "requests/s", "p50 ms", "p99 ms"], table, f"median of {repetitions} alternating runs"
    )
    for rows in ROWS:
        gap = (
            data[f"{rows} rows: dfm serve --local (/invocations)"]["p50_ms"]
            - data[f"{rows} rows: model called directly"]["p50_ms"]
        )
        data[f"{rows} rows: front overhead p50 ms"] = gap
        verdict(
            result,
            f"{rows} rows: the front adds <= {OVERHEAD_GOAL_MS:g} ms at p50",
            gap <= OVERHEAD_GOAL_MS,
            f"{fmt(gap, 2)} ms",
        )
    result["data"] = data
    return result
