"""botocore's SageMaker model as dfm reads it: Java patterns in Python, the shape cache, the catalogue."""

from __future__ import annotations

import pytest

from launcher.facts import catalog
from launcher import rules
from launcher.facts import service_model
from launcher.facts.service_model import java_regex


def matches(java: str, value: str) -> bool:
    return service_model.compiled(java_regex(java)).fullmatch(value) is not None


def real_pattern(shape: str) -> str:
    return service_model.shape(shape)["pattern"]


def test_every_pattern_a_training_request_uses_translates():
    patterns = {name: s["pattern"] for name, s in service_model.shapes().items() if "pattern" in s}
    assert len(patterns) > 20
    untranslated = {name: p for name, p in patterns.items() if service_model.shape(name)["python_pattern"] is None}
    # CreateProcessingJob's Athena dataset definitions (dfm never sends one) write supplementary characters as
    # Java surrogate pairs, which stay unchecked.
    assert set(untranslated) <= {"AthenaCatalog"}, untranslated


@pytest.mark.parametrize(
    "value, ok",
    [
        ("team", True),
        ("ads ranking", True),
        ("équipe-données", True),
        ("部门", True),
        ("v1.2_3:4/5=6+7-8@9", True),
        ("٣", True),  # \p{N}: any numeral
        ("a\u00a0b", True),  # \p{Z}: a no-break space is a separator
        ("a*b", False),
        ("a\tb", False),
        ("a;b", False),
        ("<x>", False),
    ],
)
def test_tag_pattern_unicode_classes(value, ok):
    assert matches(real_pattern("TagValue"), value) is ok


def test_dot_stops_at_java_line_terminators_and_classes_do_not():
    dot = real_pattern("HyperParameterValue")  # .*
    assert matches(dot, "a b") and not matches(dot, "a\nb") and not matches(dot, "a\u2028b")
    anything = real_pattern("TrainingEnvironmentValue")  # [\S\s]*
    assert matches(anything, "a\nb")


def test_shorthand_classes_are_ascii_as_in_java():
    role = real_pattern("RoleArn")  # ...:iam::\d{12}:role/...
    assert matches(role, "arn:aws:iam::123456789012:role/dfm")
    assert not matches(role, "arn:aws:iam::١٢٣٤٥٦٧٨٩٠١٢:role/dfm")  # Python's Unicode \d would accept these


def test_patterns_match_the_whole_value():
    name = real_pattern("TrainingJobName")  # [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}: no anchors in the model
    assert matches(name, "deepfm-ps-1") and not matches(name, "deepfm_ps") and not matches(name, "deepfm-")


def test_job_name_rule_agrees_with_the_model():
    for name in ("a", "a-b--c9", "-a", "a-", "a_b", "a" * 63, "a" * 64, "ab.c"):
        model_ok = matches(real_pattern("TrainingJobName"), name) and len(name) <= service_model.limit(
            "TrainingJobName", "max"
        )
        assert (rules.check_job_name_override(name) == []) is model_ok, name


@pytest.mark.parametrize(
    "java, value, ok",
    [
        (r"\P{L}+", "12 -", True),
        (r"\P{L}+", "1a", False),
        (r"[\P{N}]+", "ab", True),
        (r"\pL+", "ab", True),
        (r"\p{Alnum}+", "aZ9", True),
        (r"\p{Alnum}+", "é", False),
        (r"a\z", "a", True),
        (r"[\P{Alpha}]+", "1é-", True),
        (r"[\P{Alpha}]+", "1a", False),
        (r"[\w]+", "é", False),
        (r"[\W]+", "é", True),
    ],
)
def test_translation_of_other_java_constructs(java, value, ok):
    assert matches(java, value) is ok


@pytest.mark.parametrize("java", [r"[a-z&&[^b]]", r"\Qa.b\E", r"\p{javaLowerCase}", r"[a-z", "a\\"])
def test_what_is_not_translated_is_refused_not_guessed(java):
    with pytest.raises(ValueError):
        java_regex(java)


def test_shapes_are_cached_and_the_cache_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    service_model.shapes.cache_clear()
    try:
        first = service_model.shapes()
        (cached,) = (tmp_path / "dfm").glob("sagemaker-training-shapes-*.json")
        assert cached.stat().st_size < 200_000  # the training shapes only, not the 2.5 MB model

        def no_extract(source):
            raise AssertionError("the model was read again")

        monkeypatch.setattr(service_model, "_extract", no_extract)
        service_model.shapes.cache_clear()
        assert service_model.shapes() == first
    finally:
        service_model.shapes.cache_clear()


def test_an_unwritable_cache_still_checks(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))  # a file where the folder would be
    service_model.shapes.cache_clear()
    try:
        assert service_model.enum("TrainingInputMode") == ["Pipe", "File", "FastFile"]
    finally:
        service_model.shapes.cache_clear()


def test_limits_come_from_the_model():
    assert service_model.limit("HyperParameterValue", "max") == 2500
    assert service_model.limit("HyperParameterKey", "max") == 256
    assert service_model.limit("TrainingEnvironmentValue", "max") == 512
    assert service_model.shape_at("ResourceConfig.KeepAlivePeriodInSeconds") == "KeepAlivePeriodInSeconds"
    assert service_model.shape_at("Environment.value") == "TrainingEnvironmentValue"


def test_every_catalogue_instance_is_one_the_api_accepts():
    known = set(service_model.enum("TrainingInstanceType"))
    assert sorted(set(catalog.INSTANCES) - known) == []
    families = {name.split(".")[1] for name in catalog.INSTANCES}
    assert {
        "p4d",
        "p4de",
        "p5",
        "g4dn",
        "g5",
        "g6",
        "g6e",
        "r5",
        "r6i",
        "c5",
        "c6i",
        "c7i",
        "m5",
        "m6i",
        "m7i",
        "trn1",
    } <= families


def test_every_training_type_of_the_api_is_catalogued():
    """A botocore that adds a training type fails here until the catalogue has its facts (or says why not)."""
    known = service_model.enum("TrainingInstanceType")
    lacking = [
        name for name in known if name not in catalog.INSTANCES and name.split(".")[1] not in catalog.UNCATALOGUED
    ]
    assert lacking == []
    enum_families = {name.split(".")[1] for name in known}
    assert set(catalog.UNCATALOGUED) <= enum_families and not set(catalog.UNCATALOGUED) & set(catalog.FAMILIES)


def test_every_catalogued_fact_has_its_source():
    for name, info in catalog.INSTANCES.items():
        kind = catalog.family(name)
        assert kind is not None and kind.source and kind.processor, name
        assert info.gpu == (kind.gpu if info.gpus else ""), name
        assert not info.gpus or info.gpu_memory_gib, name  # every GPU kind has its memory
        assert (kind.bfloat16 is None) == (catalog.has_bfloat16(name) is None), name


@pytest.mark.parametrize(
    "name, bfloat16, gpus",
    [
        ("ml.p3dn.24xlarge", False, 8),
        ("ml.p2.xlarge", False, 1),
        ("ml.c5n.18xlarge", False, 0),
        ("ml.t3.medium", False, 0),
        ("ml.c8i.96xlarge", True, 0),
        ("ml.r8i-flex.large", True, 0),
        ("ml.c7i-flex.xlarge", True, 0),
        ("ml.p5.4xlarge", True, 1),
        ("ml.p6-b200.48xlarge", True, 8),
        ("ml.p6e-gb200.36xlarge", None, 0),
    ],
)
def test_new_families_carry_their_facts(name, bfloat16, gpus):
    assert catalog.has_bfloat16(name) is bfloat16 and catalog.instance(name).gpus == gpus


def test_catalogue_entries_are_consistent():
    for name, info in catalog.INSTANCES.items():
        assert info.vcpus > 0 and info.memory_gib > 0, name
        assert (info.gpus > 0) == bool(info.gpu), name
        assert info.usd_per_hour is None or info.usd_per_hour > 0, name


def test_walk_reports_nested_values_by_request_path():
    request = {
        "TrainingJobName": "job",
        "RoleArn": "arn:aws:iam::123456789012:role/r",
        "OutputDataConfig": {"S3OutputPath": "s3://b/o"},
        "ResourceConfig": {"InstanceType": "ml.c5.bogus", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "Environment": {"OK": "x", "1BAD": "y"},
        "VpcConfig": {"Subnets": ["subnet-1", "sub_net"], "SecurityGroupIds": ["sg-1"]},
    }
    found = dict(service_model.walk(request))
    assert set(found) == {"ResourceConfig.InstanceType", "Environment.1BAD (name)", "VpcConfig.Subnets.1"}
