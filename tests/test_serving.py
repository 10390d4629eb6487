"""`dfm serve --local`: models made by the bundled scripts' own export, served on loopback with SageMaker's TF
Serving contract, answer exactly what the SavedModel itself answers; bad requests get the container's status and
words; the server stops cleanly on SIGINT / SIGTERM; a model that does not load is one line."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import psutil
import pytest

import entry_support as es  # noqa: F401 (puts the bundled scripts on sys.path)
from spec_helpers import dfm

tf = pytest.importorskip("tensorflow")
import deepfm_checkpoint as C  # noqa: E402
import deepfm_hparams as H  # noqa: E402
import deepfm_training as T  # noqa: E402

pytestmark = pytest.mark.slow

RAW_FEATURES = {
    "format": "csv",
    "label": "clicked",
    "columns": ["clicked", "i1", "i2", "c1", "tags"],
    "numeric": {"i1": {"transform": "log1p"}, "i2": {"transform": "log1p"}},
    "categorical": {"c1": {"hash_buckets": 50}},
    "multi_hot": {"tags": {"separator": "|", "hash_buckets": 20, "max_length": 3}},
}


def _export(model_dir: Path, argv: list[str], version: int, seed: int) -> Path:
    """The bundled export of a DeepFM whose weights are scrambled (so a wrong input shows in the output)."""
    hp = H.parse_hyperparameters(["--deep_layers", "[16]", *argv])
    trainer = T.build_trainer(hp)
    for i, var in enumerate(trainer.model.all_variables):
        var.assign(tf.random.stateless_normal(var.shape, seed=[seed, i], stddev=0.3, dtype=var.dtype))
    return Path(C.export_saved_model(trainer.model, hp, str(model_dir), version=version))


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """indexed: the pre-indexed signature, versions 1 and 2; raw: raw features by name, calibrated (negative_rate
    0.5); single: a one-input SavedModel (what CSV rows can reach)."""
    root = tmp_path_factory.mktemp("exports")
    indexed = ["--feature_size", "500", "--field_size", "4"]
    _export(root / "indexed", indexed, version=1, seed=1)
    _export(root / "indexed", indexed, version=2, seed=2)
    _export(root / "raw", ["--features", json.dumps(RAW_FEATURES), "--negative_rate", "0.5"], version=1, seed=3)

    class Single(tf.Module):
        def __init__(self):
            super().__init__()
            self.w = tf.Variable([[0.5], [-1.0], [2.0]])

        @tf.function(input_signature=[tf.TensorSpec([None, 3], tf.float32, name="x")])
        def serve(self, x):
            return {"score": tf.sigmoid(tf.matmul(x, self.w)[:, 0])}

    single = Single()
    tf.saved_model.save(single, str(root / "single" / "7"), signatures={"serving_default": single.serve})
    return root


def own_predictions(version_dir: Path, inputs: dict) -> np.ndarray:
    """What the SavedModel itself answers, loaded here."""
    serve = tf.saved_model.load(str(version_dir)).signatures["serving_default"]
    specs = serve.structured_input_signature[1]
    tensors = {k: tf.constant(v, specs[k].dtype) for k, v in inputs.items()}
    return next(iter(serve(**tensors).values())).numpy()


@contextmanager
def serving(folder: Path):
    """The local server of `folder` in a thread of this process, on a free loopback port."""
    import uvicorn

    from launcher.serving import handlers
    from launcher.serving.artifact import ServePlan
    from launcher.serving.check import build_request
    from launcher.serving.model import LoadedModels
    from launcher.serving.server import build_app, listen

    request = build_request(ServePlan(folder, 0))
    sock = listen("127.0.0.1", 0)  # connections wait in its backlog until the server takes them
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    app = build_app(LoadedModels(request.artifact, request.described), handlers.load(request.artifact.root), url)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]})
    thread.start()
    try:
        yield url
    finally:
        server.should_exit = True
        thread.join()
        sock.close()
        request.close()


def call(url: str, body: str | None = None, content_type: str = "application/json", headers: dict | None = None):
    """-> (status, parsed JSON body or None)."""
    data = body.encode() if body is not None else None
    request = urllib.request.Request(url, data=data, headers={"Content-Type": content_type, **(headers or {})})
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            status, text = response.status, response.read().decode()
    except urllib.error.HTTPError as err:
        status, text = err.code, err.read().decode()
    return status, (json.loads(text) if text else None)


def indexed_rows(seed: int, rows: int = 5, fields: int = 4):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 500, (rows, fields)).tolist(), rng.uniform(0, 1, (rows, fields)).round(3).tolist()


def test_indexed_model_rows_columns_and_json_lines_equal_its_own_predictions(exports):
    ids, vals = indexed_rows(0)
    expected = own_predictions(exports / "indexed" / "2", {"feat_ids": ids, "feat_vals": vals})
    rows = [{"feat_ids": i, "feat_vals": v} for i, v in zip(ids, vals)]
    with serving(exports / "indexed") as url:
        assert call(url + "/ping")[0] == 200
        status, by_rows = call(url + "/invocations", json.dumps({"instances": rows}))
        assert status == 200
        status, by_columns = call(
            url + "/v1/models/model:predict", json.dumps({"inputs": {"feat_ids": ids, "feat_vals": vals}})
        )
        assert status == 200
        lines = "\n".join(json.dumps(r) for r in rows)
        status, by_lines = call(url + "/invocations", lines, "application/jsonlines")
        assert status == 200
        # a version named by the custom-attributes header, or in TF Serving's path: version 1's own answers
        older = own_predictions(exports / "indexed" / "1", {"feat_ids": ids, "feat_vals": vals})
        header = {"X-Amzn-SageMaker-Custom-Attributes": "tfs-model-name=model,tfs-model-version=1"}
        _, by_header = call(url + "/invocations", json.dumps({"instances": rows}), headers=header)
        _, by_path = call(url + "/v1/models/model/versions/1:predict", json.dumps({"instances": rows}))
    np.testing.assert_allclose(by_rows["predictions"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_columns["outputs"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_lines["predictions"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_header["predictions"], older, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_path["predictions"], older, rtol=0, atol=1e-6)
    assert np.abs(older - expected).max() > 1e-3  # the two versions differ: the choice is seen


def test_raw_calibrated_model_by_name_equals_its_own_predictions(exports):
    columns = {
        "i1": [0.0, 3.0, float("nan"), 12.5],
        "i2": [1.0, 0.0, 7.0, 2.0],
        "c1": ["a", "", "zz", "a"],
        "tags": ["x|y", "", "y", "x|x|z"],
    }
    expected = own_predictions(exports / "raw" / "1", columns)
    rows = [{k: v[i] for k, v in columns.items()} for i in range(4)]
    with serving(exports / "raw") as url:
        _, by_rows = call(url + "/invocations", json.dumps({"instances": rows}))
        _, by_columns = call(url + "/invocations", json.dumps({"inputs": columns}))
        _, by_generic = call(url + "/invocations", json.dumps(rows[0]))  # other JSON: wrapped as one instance
        status, csv = call(url + "/invocations", "3.0,1.0,a,x|y", "text/csv")
    np.testing.assert_allclose(by_rows["predictions"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_columns["outputs"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_generic["predictions"], expected[:1], rtol=0, atol=1e-6)
    # a CSV row reaches TF Serving as a plain list: a signature of named inputs refuses it, as in the container
    assert status == 400 and csv["error"].startswith("instances is a plain list, but expecting list of objects")


def test_csv_rows_reach_a_one_input_signature_and_equal_its_own_predictions(exports):
    x = [[1.0, 2.0, 0.5], [0.0, -1.5, 3.0], [2.0, 2.0, 2.0]]
    expected = own_predictions(exports / "single" / "7", {"x": x})
    with serving(exports / "single") as url:
        status, by_csv = call(url + "/invocations", "\n".join(",".join(str(v) for v in row) for row in x), "text/csv")
        _, by_name = call(url + "/v1/models/model:predict", json.dumps({"instances": x}))
    assert status == 200
    np.testing.assert_allclose(by_csv["predictions"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_name["predictions"], expected, rtol=0, atol=1e-6)


def test_bad_requests_get_the_containers_status_and_words(exports):
    ids, vals = indexed_rows(1, rows=1)
    good = json.dumps({"instances": [{"feat_ids": ids[0], "feat_vals": vals[0]}]})
    with serving(exports / "indexed") as url:
        answers = {
            "csv type": call(url + "/invocations", "1,2", "text/plain"),
            "unparsable": call(url + "/invocations", '{"instances": [1,}'),
            "both keys": call(url + "/invocations", json.dumps({"instances": [[1]], "inputs": [[1]]})),
            "wrong dtype": call(
                url + "/invocations", json.dumps({"instances": [{"feat_ids": [0.5] * 4, "feat_vals": vals[0]}]})
            ),
            "signature": call(
                url + "/v1/models/model:predict", json.dumps({"signature_name": "nope", "instances": [1]})
            ),
            "version": call(url + "/v1/models/model/versions/9:predict", good),
            "model": call(url + "/v1/models/other:predict", good),
            "method": call(url + "/invocations", good, headers={"X-Amzn-SageMaker-Custom-Attributes": "tfs-method=x"}),
            "route": call(url + "/v1/models/model:explain", good),
        }
        status = call(url + "/v1/models/model")
        metadata = call(url + "/v1/models/model/versions/1/metadata")
    assert answers["csv type"] == (415, {"error": "Unsupported Media Type: text/plain"})
    assert answers["unparsable"] == (400, {"error": "JSON Parse error: Invalid value. at offset: 17"})
    assert (
        answers["both keys"][0] == 400
        and "expecting only one of 'inputs' or 'instances'" in answers["both keys"][1]["error"]
    )
    assert answers["wrong dtype"][0] == 400
    assert "JSON Value: 0.5 Type: Number is not of expected type: int64" in answers["wrong dtype"][1]["error"]
    assert answers["signature"] == (400, {"error": 'Serving signature name: "nope" not found in signature def'})
    assert answers["version"] == (404, {"error": "Servable not found for request: Specific(model, 9)"})
    assert answers["model"] == (404, {"error": "Servable not found for request: Latest(other)"})
    assert answers["method"] == (400, {"error": "invalid tfs-method"})
    assert answers["route"] == (400, {"error": "Malformed request: POST /v1/models/model:explain"})
    assert status[0] == 200 and [v["version"] for v in status[1]["model_version_status"]] == ["2", "1"]
    inputs = metadata[1]["metadata"]["signature_def"]["signature_def"]["serving_default"]["inputs"]
    assert metadata[1]["model_spec"]["version"] == "1" and inputs["feat_ids"]["dtype"] == "DT_INT64"


def test_check_prints_the_signature_and_example_bodies_the_server_takes(exports, tmp_path):
    archive = tmp_path / "model.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(exports / "raw"), "1"], check=True)
    result = dfm("serve", "--check", archive, "--output", "json", check=True)
    document = json.loads(result.stdout)
    model = document["models"]["model"]
    assert model["versions"] == [1]
    assert model["signatures"]["serving_default"]["inputs"] == {
        "c1": {"dtype": "string", "shape": [-1]},
        "i1": {"dtype": "float32", "shape": [-1]},
        "i2": {"dtype": "float32", "shape": [-1]},
        "tags": {"dtype": "string", "shape": [-1]},
    }
    assert model["example"]["csv"] is None and "code/inference.py" in model["example"]["csv_note"]
    with serving(archive) as url:
        for form in ("instances", "inputs"):
            status, answer = call(url + "/invocations", json.dumps(model["example"][form]))
            assert status == 200 and len(next(iter(answer.values()))) == 2
    text = dfm("serve", "--check", archive, check=True).stdout
    assert "input  i1: float32 [-1]" in text and '{"instances": [{"c1": "", "i1": 0.0' in text


def _stop_cleanly(folder: Path, sig: int) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "launcher.cli", "serve", str(folder), "--local", "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"),
    )
    try:
        line = process.stdout.readline()  # the hand-shake: printed once the port is listening
        assert line.startswith("serving 'model' (versions 1, 2) on http://127.0.0.1:"), line + process.stderr.read()
        port = int(re.search(r"http://127\.0\.0\.1:(\d+):", line).group(1))
        assert call(f"http://127.0.0.1:{port}/ping")[0] == 200
        assert psutil.Process(process.pid).children(recursive=True) == []
        process.send_signal(sig)
        out, err = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 0, err
    assert out.strip() == "stopped" and "Traceback" not in err
    with socket.socket() as again:  # nothing is left listening (the closed connection's TIME_WAIT aside)
        again.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        again.bind(("127.0.0.1", port))
        again.listen(1)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_stops_the_server_with_nothing_left_running(exports, sig):
    _stop_cleanly(exports / "indexed", sig)


def test_a_model_that_does_not_load_is_one_line_exit_1(exports, tmp_path):
    broken = tmp_path / "broken"
    shutil.copytree(exports / "single", broken)
    shutil.rmtree(broken / "7" / "variables")
    result = dfm("serve", broken, "--local", "--port", "0")
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and result.stderr.startswith(f"dfm: {broken / '7'}: TensorFlow cannot load")
    (broken / "7" / "saved_model.pb").write_bytes(b"not a protobuf")
    result = dfm("serve", "--check", broken)
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert result.stderr.startswith(f"dfm: {broken / '7' / 'saved_model.pb'}: not a SavedModel TensorFlow can read")


def test_the_bundled_export_lays_out_what_the_container_serves(tmp_path):
    """The scripts export into SM_MODEL_DIR (/opt/ml/model, packed as model.tar.gz's root) a folder named by
    its version: the container finds one model, `model`, at that version, and nothing to refuse."""
    from launcher.serving import contract
    from launcher.serving.artifact import folder_files

    version = _export(tmp_path / "model", ["--feature_size", "100", "--field_size", "3"], version=None, seed=4)
    layout = contract.find_models(folder_files(tmp_path / "model"))
    assert layout.problems == ()
    assert layout.models == (contract.Model("model", "", (int(version.name),)),)


CSV_HANDLERS = """
import json

FIELDS = {fields!r}  # (name, kind) per CSV column; kind "ids"/"vals" take {width} columns each


def input_handler(data, context):
    text = data.read().decode("utf-8")
    if context.request_content_type != "text/csv":
        return text
    instances = []
    for line in text.splitlines():
        cells, row = line.split(","), {{}}
        for name, kind in FIELDS:
            if kind == "ids":
                row[name], cells = [int(c) for c in cells[:{width}]], cells[{width}:]
            elif kind == "vals":
                row[name], cells = [float(c) for c in cells[:{width}]], cells[{width}:]
            else:
                row[name], cells = (float(cells[0]) if kind == "number" else cells[0]), cells[1:]
        instances.append(row)
    return json.dumps({{"instances": instances}})


def output_handler(response, context):
    if response.status_code != 200:
        raise ValueError(response.content.decode("utf-8"))
    return response.content, context.accept_header
"""


def _with_handlers(tmp_path: Path, export: Path, fields, width=0) -> Path:
    folder = tmp_path / export.name
    shutil.copytree(export, folder)
    (folder / "code").mkdir()
    (folder / "code" / "inference.py").write_text(CSV_HANDLERS.format(fields=fields, width=width))
    return folder


def test_csv_through_code_inference_py_equals_the_models_own_predictions(exports, tmp_path):
    """The container's way to CSV for named inputs: code/inference.py's input_handler turns rows into named
    instances, TF Serving predicts, output_handler answers; for the indexed and the raw calibrated export."""
    ids, vals = indexed_rows(3)
    indexed = _with_handlers(tmp_path, exports / "indexed", [("feat_ids", "ids"), ("feat_vals", "vals")], width=4)
    expected = own_predictions(exports / "indexed" / "2", {"feat_ids": ids, "feat_vals": vals})
    body = "\n".join(",".join(str(v) for v in i + v) for i, v in zip(ids, vals))
    with serving(indexed) as url:
        status, by_csv = call(url + "/invocations", body, "text/csv")
        _, by_json = call(url + "/invocations", json.dumps({"inputs": {"feat_ids": ids, "feat_vals": vals}}))
        failed = call(url + "/invocations", "1,2", "text/csv")  # too few columns: the handler's error is a 500
    assert status == 200
    np.testing.assert_allclose(by_csv["predictions"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_json["outputs"], expected, rtol=0, atol=1e-6)
    assert failed[0] == 500 and "input feat_ids: got shape [1,2]" in failed[1]["error"]

    fields = [("i1", "number"), ("i2", "number"), ("c1", "string"), ("tags", "string")]
    raw = _with_handlers(tmp_path, exports / "raw", fields)
    columns = {"i1": [3.0, 0.0], "i2": [1.0, 5.0], "c1": ["a", "q"], "tags": ["x|y", "z"]}
    expected = own_predictions(exports / "raw" / "1", columns)
    with serving(raw) as url:
        status, by_csv = call(url + "/invocations", "3.0,1.0,a,x|y\n0.0,5.0,q,z\n", "text/csv")
    assert status == 200
    np.testing.assert_allclose(by_csv["predictions"], expected, rtol=0, atol=1e-6)
    document = json.loads(dfm("serve", "--check", raw, "-o", "json", check=True).stdout)
    assert document["notes"] and "csv_note" not in document["models"]["model"]["example"]


def test_an_inference_py_without_handlers_is_one_line_exit_1(exports, tmp_path):
    folder = tmp_path / "single"
    shutil.copytree(exports / "single", folder)
    (folder / "code").mkdir()
    (folder / "code" / "inference.py").write_text("def input_handler(data, context):\n    return data.read()\n")
    result = dfm("serve", folder, "--local", "--port", "0")
    assert result.returncode == 1 and result.stderr.count("\n") == 1
    assert "Handlers are not implemented correctly in user script." in result.stderr


def test_a_short_local_runs_folder_is_served_as_the_container_would(tmp_path):
    """`dfm launch --local` (one host, 12 steps) -> `dfm serve runs/<job>`: the chief's export, found where the
    run puts it, answers rows and columns as the exported SavedModel itself does."""
    from spec_helpers import LOCAL_BASE, write_spec

    data = tmp_path / "data"
    synth = ["--rows", "2000", "--files", "2", "--eval-rows", "500", "--eval-files", "1", "--seed", "5"]
    dfm("data", "synth", "--out", data, *synth, "--field-size", "6", "--feature-size", "300", check=True)
    spec = write_spec(
        tmp_path,
        {
            "name": "serve-run",
            "hyperparameters": {"field_size": 6, "feature_size": 300, "batch_size": 128, "max_steps": 12},
            "local": {
                "channels": {"train": str(data / "train"), "eval": str(data / "eval")},
                "run_dir": str(tmp_path / "runs"),
            },
        },
        base=LOCAL_BASE,
    )
    dfm("launch", spec, "--local", timeout=400, check=True)
    (job,) = [p for p in (tmp_path / "runs").iterdir() if (p / "hosts").is_dir()]
    (version,) = list((job / "hosts" / "algo-1" / "model").glob("*/saved_model.pb"))
    document = json.loads(dfm("serve", "--check", job, "-o", "json", check=True).stdout)
    assert document["models"]["model"]["versions"] == [int(version.parent.name)]
    ids, vals = indexed_rows(6, rows=8, fields=6)
    ids = (np.array(ids) % 300).tolist()
    expected = own_predictions(version.parent, {"feat_ids": ids, "feat_vals": vals})
    with serving(job) as url:
        _, by_rows = call(
            url + "/invocations",
            json.dumps({"instances": [{"feat_ids": i, "feat_vals": v} for i, v in zip(ids, vals)]}),
        )
        _, by_columns = call(
            url + "/v1/models/model:predict", json.dumps({"inputs": {"feat_ids": ids, "feat_vals": vals}})
        )
    np.testing.assert_allclose(by_rows["predictions"], expected, rtol=0, atol=1e-6)
    np.testing.assert_allclose(by_columns["outputs"], expected, rtol=0, atol=1e-6)


# ------------------------------------------------------------------------------------------------ dfm transform --local
def _scored(path: Path) -> list:
    return [json.loads(line)["predictions"] for line in path.read_text().splitlines()]


def test_a_local_transform_of_json_lines_equals_the_models_own_predictions_line_by_line(exports, tmp_path, capsys):
    from spec_helpers import run

    ids, vals = indexed_rows(7, rows=6)
    data = tmp_path / "in" / "part-0.jsonl"
    data.parent.mkdir()
    data.write_text("".join(json.dumps({"feat_ids": i, "feat_vals": v}) + "\n" for i, v in zip(ids, vals)))
    columns = {
        "i1": [0.0, 3.0, float("nan")],
        "i2": [1.0, 0.0, 7.0],
        "c1": ["a", "", "zz"],
        "tags": ["x|y", "", "y"],
    }
    raw = tmp_path / "raw.jsonl"
    raw.write_text("".join(json.dumps({k: v[n] for k, v in columns.items()}) + "\n" for n in range(3)))

    code, out, err = run(
        capsys,
        "transform",
        exports / "indexed",
        "--local",
        "--data",
        data.parent,
        "--content-type",
        "application/jsonlines",
    )
    assert code == 0, err
    code, _, err = run(
        capsys,
        "transform",
        exports / "raw",
        "--local",
        "--data",
        raw,
        "--content-type",
        "application/json",
        "--output-path",
        tmp_path / "scored",
    )
    assert code == 0, err

    by_line = _scored(data.with_name("part-0.jsonl.out"))  # SingleRecord: one output line per input line
    assert len(by_line) == 6 and all(len(p) == 1 for p in by_line)
    expected = own_predictions(exports / "indexed" / "2", {"feat_ids": ids, "feat_vals": vals})
    np.testing.assert_allclose([p[0] for p in by_line], expected, rtol=0, atol=1e-6)
    calibrated = _scored(tmp_path / "scored" / "raw.jsonl.out")
    np.testing.assert_allclose([p[0] for p in calibrated], own_predictions(exports / "raw" / "1", columns), atol=1e-6)


def test_a_local_multi_record_transform_of_csv_answers_once_per_request(exports, tmp_path, capsys):
    """MultiRecord: as many lines a request as fit in --max-payload, one output line per request (as SageMaker
    assembles a mini-batch's answer); the predictions in order equal the model's own."""
    from spec_helpers import run

    rng = np.random.default_rng(3)
    x = rng.uniform(-2, 2, (40, 3)).round(4).tolist()
    data = tmp_path / "rows.csv"
    data.write_text("".join(",".join(str(v) for v in row) + "\n" for row in x))
    expected = own_predictions(exports / "single" / "7", {"x": x})

    code, out, err = run(
        capsys, "transform", exports / "single", "--local", "--data", data, "--strategy", "MultiRecord"
    )
    assert code == 0, err
    batches = _scored(tmp_path / "rows.csv.out")
    assert len(batches) == 1 and out.strip().endswith("(1 lines)")
    np.testing.assert_allclose(batches[0], expected, rtol=0, atol=1e-6)

    code, _, err = run(capsys, "transform", exports / "single", "--local", "--data", data)  # SingleRecord
    assert code == 0, err
    np.testing.assert_allclose([p[0] for p in _scored(tmp_path / "rows.csv.out")], expected, rtol=0, atol=1e-6)


def test_a_local_transform_of_lines_the_model_refuses_is_one_line_exit_1(exports, tmp_path, capsys):
    from spec_helpers import run

    data = tmp_path / "bad.csv"
    data.write_text("1.0,2.0,3.0\n1.0,oops\n")
    code, out, err = run(capsys, "transform", exports / "single", "--local", "--data", data)
    assert code == 1 and err.count("\n") == 1
    assert err.startswith(f"dfm: {data} request 2: the model answered 400: "), err
    assert not (tmp_path / "bad.csv.out").exists() and not (tmp_path / "bad.csv.out.partial").exists()


def test_a_training_jobs_model_is_downloaded_checked_and_its_copy_removed(exports, aws, tmp_path, capsys, monkeypatch):
    import tempfile

    import boto3

    from spec_helpers import run

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    archive = tmp_path / "model.tar.gz"
    subprocess.run(["tar", "-czf", str(archive), "-C", str(exports / "indexed"), "1", "2"], check=True)
    s3 = boto3.client("s3", region_name="us-east-1")
    s3.create_bucket(Bucket="dfm-test-bucket")
    boto3.client("sagemaker", region_name="us-east-1").create_training_job(
        TrainingJobName="deepfm-ps-1",
        RoleArn="arn:aws:iam::123456789012:role/dfm-training",
        AlgorithmSpecification={"TrainingImage": "tensorflow-training:2.14.1-cpu-py310", "TrainingInputMode": "File"},
        OutputDataConfig={"S3OutputPath": "s3://dfm-test-bucket/out"},
        ResourceConfig={"InstanceType": "ml.c5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
        StoppingCondition={"MaxRuntimeInSeconds": 600},
    )
    s3.upload_file(str(archive), "dfm-test-bucket", "out/deepfm-ps-1/output/model.tar.gz")

    for model in ("deepfm-ps-1", "s3://dfm-test-bucket/out/deepfm-ps-1/output/model.tar.gz"):
        code, out, err = run(capsys, "serve", model, "--check", "--output", "json")
        assert code == 0, err
        assert json.loads(out)["models"]["model"]["versions"] == [1, 2]
        assert list((tmp_path / "tmp").iterdir()) == []  # the download went with the request
    code, out, err = run(capsys, "serve", "no-such-job", "--check")
    assert code == 1 and len(err.strip().splitlines()) == 1 and "no-such-job" in err
