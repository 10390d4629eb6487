"""The spec loader and schema: safe YAML with line numbers, ${ENV}, extends:, --set, the bad-spec corpus."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from pathlib import Path

import jsonschema
import pytest

from launcher import rules
from launcher.errors import DfmError
from launcher.spec import Spec, SpecError, json_schema, load_spec
from spec_helpers import BASE, CONFIGS, REPO, line_of, write_spec

BAD_SPECS = sorted((REPO / "tests" / "bad_specs").glob("*.yaml"))
# Files that cannot carry an `# expect:` comment.
EXPECTED_WITHOUT_COMMENT = {"empty.yaml": "the file is empty", "binary.yaml": "binary file"}
ONE_LINE = re.compile(r"^[^\n:]+(:\d+)?: [^\n]+$")


def problems_of(path: Path, overrides=(), env=None) -> list[str]:
    """Every error line, from the loader or the rules."""
    try:
        spec = load_spec(path, overrides, env=env)
    except SpecError as err:
        return err.lines()
    return [f.render(spec) for f in rules.errors(rules.check(spec))]


def test_minimal_spec_loads_with_defaults(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    assert spec.name == "deepfm-test" and spec.instance.count == 1 and spec.instance.volume_gb == 30
    assert spec.distribution_kind == "none" and spec.data.mode == "File" and spec.data.s3_shard is False
    assert spec.max_run == 86400 and spec.warm_pool_seconds == 0 and spec.local.run_dir == "runs"
    assert spec.checkpoint_config.s3 == "auto"  # checkpoints default to <output>/<job>/checkpoints


def test_unknown_key_names_its_line_and_the_likely_key(tmp_path):
    path = write_spec(tmp_path, {"instance": {"tpye": "ml.c5.xlarge"}})
    lines = problems_of(path)
    assert f"{path}:{line_of(path, 'tpye')}: instance.tpye: unknown key (did you mean 'type'?)" in lines[0]


def test_wrong_type_names_field_line_and_value(tmp_path):
    path = write_spec(tmp_path, {"max_run": "an hour"})
    (line,) = problems_of(path)
    assert line.startswith(f"{path}:{line_of(path, 'max_run')}: max_run: ") and "'an hour'" in line


def test_every_problem_is_reported_at_once(tmp_path):
    path = write_spec(tmp_path, {"region": "Virginia", "data": {"mode": "Pipes"}, "instance": {"count": 0}})
    fields = [line.split(": ")[1] for line in problems_of(path)]
    assert fields == ["region", "instance.count", "data.mode"]  # sorted by line


def test_env_interpolation_with_defaults_escapes_and_types(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(
        "\n".join(
            [
                "name: ${JOB:-deepfm}",
                "role: ${ROLE}",
                "region: us-east-1",
                "entry_point: deepfm-ps",
                'framework: {version: "2.14"}',
                "instance:",
                "  type: ml.c5.xlarge",
                "  count: ${COUNT:-2}",  # unquoted and whole: typed like YAML (an int)
                "data: {train: 's3://${BUCKET}/train/'}",
                "output: s3://${BUCKET}/out/",
                "environment: {PRICE: 'costs $$5', COUNT_TEXT: '${COUNT:-2}'}",
            ]
        )
    )
    spec = load_spec(path, env={"ROLE": BASE["role"], "BUCKET": "my-bucket"})
    assert spec.name == "deepfm" and spec.role == BASE["role"] and spec.instance.count == 2
    assert spec.data.train == "s3://my-bucket/train/" and spec.output == "s3://my-bucket/out/"
    assert spec.environment == {"PRICE": "costs $5", "COUNT_TEXT": "2"}
    assert load_spec(path, env={"ROLE": BASE["role"], "BUCKET": "b-2", "COUNT": "3"}).instance.count == 3

    (line,) = problems_of(path, env={"BUCKET": "my-bucket"})
    assert line == f"{path}:2: role: environment variable ROLE is not set: export it, or write ${{ROLE:-default}}"


def test_set_overrides_parse_values_as_yaml_and_win(tmp_path):
    path = write_spec(tmp_path, {"hyperparameters": {"epochs": 3}})
    spec = load_spec(
        path,
        [
            "instance.count=4",
            "hyperparameters.deep_layers=[200, 100]",
            "hyperparameters.batch_norm=false",
            "hyperparameters.optimizer=adam",
            "local.channels.train=data/x",
            "name='007'",
        ],
    )
    assert spec.instance.count == 4 and spec.instance.type == "ml.c5.xlarge"
    assert spec.hyperparameters == {"epochs": 3, "deep_layers": [200, 100], "batch_norm": False, "optimizer": "adam"}
    assert spec.local.channels == {"train": "data/x"} and spec.name == "007"
    assert str(spec.where("instance.count")) == "--set"
    assert problems_of(path, ["instance.count=zero"])[0].startswith("--set: instance.count: ")


@pytest.mark.parametrize(
    "override, message",
    [
        ("instance.count", "expected dotted.key=value"),
        ("a..b=1", "expected dotted.key=value"),
        ("name.first=x", "name is not a mapping"),
        ("x=*y", "anchors and aliases"),
    ],
)
def test_bad_set_overrides_are_usage_errors(tmp_path, override, message):
    with pytest.raises(DfmError, match=re.escape(message)) as caught:
        load_spec(write_spec(tmp_path), [override])
    assert caught.value.exit_code == 2 and "\n" not in caught.value.message


def test_extends_deep_merges_relative_to_the_file_and_keeps_each_files_lines(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    write_spec(shared, {"hyperparameters": {"epochs": 5, "batch_size": 512}, "tags": {"team": "ads"}}, name="base.yaml")
    child = tmp_path / "job.yaml"
    child.write_text(
        "extends: shared/base.yaml\nname: child-job\nhyperparameters: {epochs: 1}\ndata: {train: [s3://dfm-bucket/a/, s3://dfm-bucket/b/]}\n"
    )
    spec = load_spec(child)
    assert spec.name == "child-job" and spec.hyperparameters == {"epochs": 1, "batch_size": 512}
    assert spec.train_sources == ["s3://dfm-bucket/a/", "s3://dfm-bucket/b/"] and spec.tags == {"team": "ads"}
    assert spec.where("hyperparameters.epochs").file == str(child)
    base_where = spec.where("hyperparameters.batch_size")
    assert Path(base_where.file).resolve() == (shared / "base.yaml").resolve()
    assert base_where.line == line_of(shared / "base.yaml", "batch_size")


def test_extends_cycle_is_refused(tmp_path):
    (tmp_path / "a.yaml").write_text("extends: b.yaml\nname: a\n")
    (tmp_path / "b.yaml").write_text("name: b\nextends: a.yaml\n")
    (line,) = problems_of(tmp_path / "a.yaml")
    assert line.endswith("b.yaml:2: extends: cycle: a.yaml -> b.yaml -> a.yaml")


def test_alias_bomb_is_refused_before_expansion(tmp_path):
    layers = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for i in range(1, 12):  # 9**12 strings if anything expanded it
        prev, cur = chr(96 + i), chr(97 + i)
        layers.append(f"{cur}: &{cur} [" + ",".join([f"*{prev}"] * 9) + "]")
    path = tmp_path / "bomb.yaml"
    path.write_text("\n".join(layers))
    assert problems_of(path) == [f"{path}:1: YAML anchors and aliases (&x, *x) are not allowed: use extends:"]


def test_python_tags_never_construct_objects(tmp_path):
    marker = tmp_path / "pwned"
    path = tmp_path / "evil.yaml"
    path.write_text(f'name: !!python/object/apply:os.system ["touch {marker}"]\n')
    (line,) = problems_of(path)
    assert "python/object/apply:os.system is not allowed" in line and not marker.exists()


@pytest.mark.parametrize("path", BAD_SPECS, ids=lambda p: p.name)
def test_bad_spec_corpus_fails_with_one_line_errors(path):
    raw = path.read_bytes()
    match = re.match(rb"# expect: (.*)\n", raw)
    expected = match.group(1).decode() if match else EXPECTED_WITHOUT_COMMENT[path.name]
    lines = problems_of(path)
    assert lines, f"{path.name} was accepted"
    assert all(ONE_LINE.match(line) for line in lines), lines
    assert any(expected in line for line in lines), lines


def test_json_schema_describes_the_spec_and_accepts_the_configs():
    schema = json_schema()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert {"name", "instance", "distribution", "data", "local"} <= set(schema["properties"])
    assert schema["additionalProperties"] is False
    validator = jsonschema.Draft202012Validator(schema)
    for config in CONFIGS:
        data = load_spec(config).model_dump(mode="json", exclude_none=True)
        assert list(validator.iter_errors(data)) == [], config.name
    with_typo = {**load_spec(CONFIGS[0]).model_dump(mode="json", exclude_none=True), "instnce": {}}
    assert any("instnce" in e.message for e in validator.iter_errors(with_typo))


def test_spec_is_immutable(tmp_path):
    spec = load_spec(write_spec(tmp_path))
    with pytest.raises(Exception):
        spec.name = "other"
    assert isinstance(spec, Spec) and json.dumps(spec.model_dump(mode="json"))


# --- reading: every failure one line, nothing blocks, the byte cap holds whatever the file claims -------


def _special(tmp_path, kind: str) -> Path:
    if kind == "fifo":
        os.mkfifo(tmp_path / "fifo.yaml")
        return tmp_path / "fifo.yaml"
    if kind == "folder":
        (tmp_path / "folder.yaml").mkdir()
        return tmp_path / "folder.yaml"
    if kind == "too long":
        return tmp_path / ("x" * 300 + ".yaml")
    return Path(kind)


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "kind, words",
    [
        ("/dev/zero", "not a regular file"),
        ("fifo", "not a regular file"),
        ("/dev/null", "not a regular file"),
        ("folder", "a folder, not a spec file"),
        ("too long", "cannot read: File name too long"),
    ],
)
def test_unreadable_specs_fail_at_once_on_one_line(tmp_path, kind, words):
    path = _special(tmp_path, kind)
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    (line,) = caught.value.lines()
    assert line == f"{path}: {words}" or (words in line and line.startswith(str(path)))


@pytest.mark.timeout(20)
@pytest.mark.parametrize(
    "kind, words",
    [
        ("/dev/zero", "not a regular file"),
        ("fifo", "not a regular file"),
        ("folder", "a folder"),
        ("too long", "extends: base spec cannot be read: File name too long"),
    ],
)
def test_unreadable_base_specs_fail_at_once_on_one_line(tmp_path, kind, words):
    base = _special(tmp_path, kind)
    path = write_spec(tmp_path, {"extends": str(base)})
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    (line,) = caught.value.lines()
    assert words in line


def test_reading_stops_at_the_byte_cap(tmp_path, monkeypatch):
    path = tmp_path / "big.yaml"
    path.write_text("# " + "x" * (2 << 20) + "\n")
    reads = []
    real_read = os.read
    monkeypatch.setattr(os, "read", lambda fd, n: reads.append(n) or real_read(fd, n))
    with pytest.raises(SpecError) as caught:
        load_spec(path)
    assert "a spec is at most 1048576" in caught.value.lines()[0]
    assert sum(reads) <= (1 << 20) + 1


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_a_file_in_an_unreadable_folder_is_one_line(tmp_path):
    folder = tmp_path / "locked"
    folder.mkdir()
    path = write_spec(folder)
    folder.chmod(0)
    try:
        with pytest.raises(SpecError) as caught:
            load_spec(path)
        assert caught.value.lines() == [f"{path}: cannot read: Permission denied"]
    finally:
        folder.chmod(0o700)


def test_spec_data_compiles_like_the_file_it_came_from(tmp_path):
    from launcher.compile import compile_spec
    from spec_helpers import BASE, write_spec

    from_file = compile_spec(str(write_spec(tmp_path, {"instance": {"count": 2}})), job_name="j")
    from_data = compile_spec({**BASE, "instance": {**BASE["instance"], "count": 2}}, job_name="j")
    unplaced = lambda compiled: dataclasses.replace(compiled.plan, warnings=())  # noqa: E731 (warnings name the file)
    assert from_data.ok and unplaced(from_data) == unplaced(from_file)
    refused = compile_spec({**BASE, "hyperparameters": {"batch_size": 0}})
    assert refused.errors == ("<spec>:1: hyperparameters.batch_size: must be at least 1, got 0",)


@pytest.mark.parametrize("word, long", [("horovod", {"horovod": {}}), ("parameter_server", {"parameter_server": {}})])
def test_a_distribution_word_reads_as_its_mapping_with_the_defaults(word, long):
    short = load_spec({**BASE, "distribution": word})
    assert short.distribution == load_spec({**BASE, "distribution": long}).distribution
    assert short.distribution_kind == word and short.processes_per_host == 1


@pytest.mark.parametrize(
    "changes, field",
    [
        ({"retry": {"max_attempts": True}}, "retry.max_attempts"),
        ({"instance": {"count": True}}, "instance.count"),
        ({"max_run": False}, "max_run"),
        ({"recover": {"backoff_s": True}}, "recover.backoff_s"),
        ({"stall_timeout": True}, "stall_timeout"),
        (
            {
                "tune": {
                    "objective": "eval:auc",
                    "max_jobs": True,
                    "ranges": {"learning_rate": {"min": 0.001, "max": 0.1}},
                }
            },
            "tune.max_jobs",
        ),
        (
            {"tune": {"objective": "eval:auc", "ranges": {"epochs": {"min": True, "max": 3, "type": "integer"}}}},
            "tune.ranges.epochs",
        ),
    ],
)
def test_a_boolean_is_no_number(tmp_path, changes, field):
    """YAML's true is not 1: every integer and number field refuses booleans."""
    path = write_spec(tmp_path, changes)
    lines = problems_of(path)
    assert any(f": {field}" in line and ("True" in line or "False" in line) for line in lines), lines


def test_max_attempts_true_exits_2(tmp_path, capsys):
    from spec_helpers import run

    code, _, err = run(capsys, "validate", write_spec(tmp_path, {"retry": {"max_attempts": True}}))
    assert code == 2 and "retry.max_attempts: Input should be a valid integer, got True" in err


def test_every_spec_model_is_strict():
    """Strict models take no boolean for a number (nor a number for a string) anywhere in the schema."""
    from pydantic import BaseModel

    def models(annotation, seen):
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            if annotation not in seen:
                seen.add(annotation)
                for info in annotation.model_fields.values():
                    models(info.annotation, seen)
            return seen
        for argument in getattr(annotation, "__args__", ()) + tuple(getattr(annotation, "__metadata__", ())):
            models(argument, seen)
        return seen

    found = models(Spec, set())
    assert len(found) > 20 and [m.__name__ for m in found if not m.model_config.get("strict")] == []
