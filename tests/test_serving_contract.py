"""SageMaker's TensorFlow Serving contract as data (launcher.serving.contract), and artifacts refused the way the
container refuses them (launcher.serving.artifact, `dfm serve --check`): no TensorFlow needed."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import pytest

from launcher.cli import main
from launcher.serving import contract as C
from launcher.serving import rest as R
from launcher.serving.artifact import open_artifact
from launcher.errors import DfmError

INDEXED = R.Signature(
    {"feat_ids": R.TensorSpec("int64", (-1, 3)), "feat_vals": R.TensorSpec("float32", (-1, 3))},
    {"probabilities": R.TensorSpec("float32", (-1,))},
)
ONE_INPUT = R.Signature({"x": R.TensorSpec("float32", (-1, 2))}, {"y": R.TensorSpec("float32", (-1,))})


def refused(call, *args, status=400):
    with pytest.raises(C.ServingError) as caught:
        call(*args)
    assert caught.value.status == status
    return caught.value.message


# ------------------------------------------------------------------------------------------------ the artifact
def test_versions_at_the_root_are_the_model_named_model():
    layout = C.find_models(
        ["1/saved_model.pb", "1/variables/variables.index", "12/saved_model.pb", "code/inference.py"]
    )
    assert layout.problems == ()
    assert layout.models == (C.Model("model", "", (1, 12)),)


def test_a_folder_above_the_version_names_the_model_and_the_first_found_is_the_default():
    layout = C.find_models(["ctr/3/saved_model.pb", "b/deeper/cvr/7/saved_model.pb"])
    assert [(m.name, m.folder, m.versions) for m in layout.models] == [
        ("ctr", "ctr", (3,)),
        ("cvr", "b/deeper/cvr", (7,)),
    ]
    assert layout.default.name == "ctr" and layout.problems == ()


def test_a_savedmodel_without_a_version_folder_gets_the_containers_words_and_the_fix():
    (problem,) = C.find_models(["saved_model.pb", "variables/variables.index"]).problems
    assert problem.startswith("no SavedModel bundles found! (saved_model.pb is in the artifact's root")
    assert "1/saved_model.pb" in problem
    (problem,) = C.find_models(["export/saved_model.pb"]).problems
    assert "saved_model.pb is in export/" in problem and "export/1/saved_model.pb" in problem
    (problem,) = C.find_models(["model.h5"]).problems
    assert problem.startswith("no SavedModel bundles found! (no saved_model.pb anywhere in it)")


def test_code_inside_the_version_folder_is_refused_with_where_it_belongs():
    (problem,) = C.find_models(["1/saved_model.pb", "1/code/inference.py"]).problems
    assert "1/code/inference.py is inside the version folder 1/" in problem
    assert "code/inference.py at the artifact's root" in problem and "move 1/code/ to code/" in problem
    assert C.find_models(["1/saved_model.pb", "code/inference.py"]).problems == ()


def test_two_models_of_one_name_are_refused():
    (problem,) = C.find_models(["a/m/1/saved_model.pb", "b/m/2/saved_model.pb"]).problems
    assert "two models are named 'm' (a/m, b/m)" in problem


def _tar(path, files):
    with tarfile.open(path, "w:gz") as archive:
        for name in files:
            data = b"x"
            info = tarfile.TarInfo(name)
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return path


@pytest.mark.parametrize(
    "files,words",
    [
        (["saved_model.pb", "variables/variables.index"], "no SavedModel bundles found!"),
        (["1/saved_model.pb", "1/code/inference.py"], "is inside the version folder 1/"),
    ],
)
def test_a_refused_model_tar_gz_is_one_line_exit_1(tmp_path, capsys, files, words):
    archive = _tar(tmp_path / "model.tar.gz", files)
    with pytest.raises(DfmError, match=words) as caught:
        open_artifact(archive)
    assert caught.value.exit_code == 1
    assert main(["serve", "--check", str(archive)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"dfm: {archive}: ") and words in err
    assert not list(tmp_path.glob("dfm-serve-*"))


def test_the_version_folder_itself_is_refused_with_its_parent_named(tmp_path):
    version = tmp_path / "run" / "1700000000"
    version.mkdir(parents=True)
    (version / "saved_model.pb").write_bytes(b"x")
    with pytest.raises(DfmError, match=f"is itself a version folder: serve its parent, {tmp_path / 'run'}"):
        open_artifact(version)


def test_a_local_runs_folder_serves_its_chiefs_export(tmp_path):
    (tmp_path / "hosts" / "algo-1" / "model" / "5").mkdir(parents=True)
    (tmp_path / "hosts" / "algo-1" / "model" / "5" / "saved_model.pb").write_bytes(b"x")
    artifact = open_artifact(tmp_path)
    assert artifact.root == tmp_path / "hosts" / "algo-1" / "model"
    assert artifact.layout.models == (C.Model("model", "", (5,)),)


def test_serve_without_local_or_check_says_what_to_add(tmp_path, capsys):
    assert main(["serve", str(tmp_path)]) == 2
    assert "add --local" in capsys.readouterr().err


# ------------------------------------------------------------------------------------------------ the front
def test_custom_attributes_choose_model_version_and_method():
    header = "tfs-model-name=ctr,tfs-model-version=3,tfs-method=predict,other=1"
    assert C.invocation_route(header, "model") == C.Route("ctr", 3, "predict")
    assert C.invocation_route(None, "model") == C.Route("model", None, "predict")
    assert refused(C.invocation_route, "tfs-method=explain", "model") == "invalid tfs-method"
    assert refused(C.invocation_route, "tfs-model-version=latest", "model") == "invalid tfs-model-version"
    assert refused(C.invocation_route, "tfs-model-name=../x", "model") == "invalid tfs-model-name"


def test_json_bodies_pass_through_or_are_wrapped_as_instances():
    body = '{"instances": [[1, 2]]}'
    assert C.front_body("application/json", body) == body
    assert json.loads(C.front_body("application/json; charset=utf-8", "[1, 2]")) == {"instances": [[1, 2]]}
    assert json.loads(C.front_body("application/json", "[[1, 2], [3, 4]]")) == {"instances": [[1, 2], [3, 4]]}
    assert json.loads(C.front_body("application/json", '{"x": [1, 2]}')) == {"instances": [{"x": [1, 2]}]}
    lines = '{"x": [1, 2]}\n{"x": [3, 4]}\n'
    assert json.loads(C.front_body("application/jsonlines", lines)) == {"instances": [{"x": [1, 2]}, {"x": [3, 4]}]}


def test_csv_rows_become_instances_numbers_as_numbers():
    body = '1,2.5,-3e2\nabc,"x,y",4\n\n7\n'
    assert json.loads(C.front_body("text/csv", body)) == {"instances": [[1, 2.5, -300.0], ["abc", "x,y", 4], 7]}


def test_other_content_types_are_415_with_the_containers_words():
    assert refused(C.front_body, "text/plain", "1,2", status=415) == "Unsupported Media Type: text/plain"
    assert refused(C.front_body, None, "1,2", status=415) == "Unsupported Media Type: Unknown"


# ------------------------------------------------------------------------------------------------ TF Serving REST
def test_instances_rows_and_inputs_columns_give_the_same_arrays():
    rows = {
        "instances": [
            {"feat_ids": [1, 2, 3], "feat_vals": [1, 0.5, 1]},
            {"feat_ids": [4, 5, 6], "feat_vals": [0, 1, 2]},
        ]
    }
    columns = {"inputs": {"feat_ids": [[1, 2, 3], [4, 5, 6]], "feat_vals": [[1, 0.5, 1], [0, 1, 2]]}}
    by_rows = R.predict_request(rows, INDEXED, "serving_default")
    by_columns = R.predict_request(columns, INDEXED, "serving_default")
    assert by_rows.row_format and not by_columns.row_format
    for key in ("feat_ids", "feat_vals"):
        np.testing.assert_array_equal(by_rows.inputs[key], by_columns.inputs[key])
    assert by_rows.inputs["feat_ids"].dtype == np.int64 and by_rows.inputs["feat_vals"].dtype == np.float32
    assert by_rows.inputs["feat_ids"].tolist() == [[1, 2, 3], [4, 5, 6]]


def test_a_one_input_signature_takes_plain_rows_and_strings_become_bytes():
    request = R.predict_request({"instances": [[1, 2], [3, 4]]}, ONE_INPUT, "serving_default")
    assert request.inputs["x"].shape == (2, 2)
    words = R.Signature({"w": R.TensorSpec("string", (-1,))}, {})
    request = R.predict_request({"instances": ["a", {"b64": "Yg=="}]}, words, "serving_default")
    assert request.inputs["w"].tolist() == [b"a", b"b"]


@pytest.mark.parametrize(
    "doc,message",
    [
        (
            {"instances": [[1, 2, 3]], "inputs": {}},
            "Not formatted correctly expecting only one of 'inputs' or 'instances' keys to exist",
        ),
        (
            {"instances": [[1, 2, 3]]},
            "instances is a plain list, but expecting list of objects as multiple input tensors",
        ),
        ({"inputs": [[1, 2, 3]]}, "inputs is a plain value/list, but expecting an object as multiple input tensors"),
        ({"instances": []}, "No values in 'instances' array"),
        ({"instances": {"feat_ids": [1]}}, "Excepting 'instances' to be an list/array"),
        ({"rows": []}, "Missing 'inputs' or 'instances' key"),
        (
            {"instances": [{"feat_ids": [1.5, 2, 3], "feat_vals": [1, 1, 1]}]},
            "Failed to process element: 0 key: feat_ids of 'instances' list. Error: JSON Value: 1.5 Type: Number is "
            "not of expected type: int64",
        ),
        (
            {"instances": [{"feat_ids": [1, 2, 3], "feat_vals": [1, 1, 1]}, {"feat_ids": [1, 2], "feat_vals": [1, 1]}]},
            "Failed to process element: 1 key: feat_ids of 'instances' list. Error: Expecting tensor size: 3 but "
            "got: 2",
        ),
        (
            {"instances": [{"feat_ids": [1, 2, 3]}]},
            "Failed to process element: 0 of 'instances' list. JSON object: {\"feat_ids\":[1,2,3]} keys must be "
            "equal to: feat_ids,feat_vals",
        ),
        ({"inputs": {"feat_ids": [[1, 2, 3]]}}, "Missing named input: feat_vals in 'inputs' object."),
        ({"inputs": {"feat_ids": [[1, 2]], "feat_vals": [[1, 1]]}}, "input feat_ids: got shape [1,2], the signature"),
        (
            {"inputs": {"feat_ids": [[1, 2, 3], [4, 5]], "feat_vals": [[1, 1, 1]]}},
            "Encountered list at unexpected size: 2 at level: 1 expected size: 3",
        ),
        ({"inputs": {"feat_ids": [[1, 2, 3]], "feat_vals": [[1, 1, 16777217]]}}, "without loss of precision"),
    ],
)
def test_malformed_predict_bodies_get_tf_servings_words(doc, message):
    assert message in refused(R.predict_request, doc, INDEXED, "serving_default")


def test_unparsable_json_and_a_bad_signature_name_are_400():
    assert refused(R.parse_json, "") == "JSON Parse error: The document is empty"
    assert refused(R.parse_json, '{"instances": [1,}').startswith("JSON Parse error: Invalid value. at offset: 17")
    assert refused(R.parse_json, "[1]") == "JSON Value: [1] Is not object"
    assert "'signature_name' key must be a string value" in refused(R.signature_name, {"signature_name": 3})
    assert R.signature_name({}) == "serving_default"
    assert R.unknown_signature("x").message == 'Serving signature name: "x" not found in signature def'


def test_outputs_are_predictions_for_rows_and_outputs_for_columns():
    p = np.array([0.25, 0.1], np.float32)
    assert R.predict_response({"probabilities": p}, True) == {"predictions": [0.25, 0.1]}
    assert R.predict_response({"probabilities": p}, False) == {"outputs": [0.25, 0.1]}
    two = {"a": p, "b": np.array([1, 2], np.int64)}
    assert R.predict_response(two, True) == {"predictions": [{"a": 0.25, "b": 1}, {"a": 0.1, "b": 2}]}
    assert R.predict_response(two, False) == {"outputs": {"a": [0.25, 0.1], "b": [1, 2]}}


def test_example_bodies_are_requests_the_signature_takes():
    bodies = R.example_bodies(INDEXED)
    assert R.predict_request(bodies["instances"], INDEXED, "serving_default").inputs["feat_ids"].shape == (2, 3)
    assert R.predict_request(bodies["inputs"], INDEXED, "serving_default").inputs["feat_vals"].shape == (2, 3)
    assert "csv" not in bodies  # two named inputs: a CSV row (a plain list) cannot reach them
    csv = R.example_bodies(ONE_INPUT)["csv"]
    tfs = json.loads(C.front_body("text/csv", csv))
    assert R.predict_request(tfs, ONE_INPUT, "serving_default").inputs["x"].shape == (2, 2)


def test_the_servers_connections_send_answers_without_waiting_for_acks():
    """asyncio (under uvicorn) sets TCP_NODELAY only on connections of a socket whose protocol is TCP: without it a
    kept-alive client waited out a delayed ACK (~40 ms) for each answer's body."""
    import asyncio
    import socket

    from launcher.serving.server import listen

    sock = listen("127.0.0.1", 0)
    seen = {}

    async def main():
        async def accepted(reader, writer):
            seen["nodelay"] = writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
            writer.close()

        server = await asyncio.start_server(accepted, sock=sock)
        reader, writer = await asyncio.open_connection(*sock.getsockname()[:2])
        await reader.read()  # until the server closes it: the handler has run
        writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(main())
    assert seen["nodelay"] != 0
