"""`dfm probe`'s plan (candidates through the rules, capped), its measurements' arithmetic and report, and the dry
run (offline). The SageMaker executor is tested in test_probe_sagemaker.py, one local probe in test_probe_local.py."""

from __future__ import annotations

import json

import pytest
from spec_helpers import BASE, merged, run, write_spec

from launcher.compile import compile_spec
from launcher.plans import probe_plan as probe_plan
from launcher.plans import probe_results as results
from launcher.plans.probe_results import Measurement
from launcher.spec import SpecError, load_spec


def build(tmp_path, changes: dict | None = None, tries=(), **options):
    path = write_spec(tmp_path, changes)
    spec = load_spec(path)

    def compile_candidate(lines, job_name):
        compiled = compile_spec(str(path), lines, job_name)
        return compiled.plan, compiled.errors

    return probe_plan.build_probe_plan(spec, compile_candidate, tries=tries, name="deepfm-test-probe-x", **options)


def test_tries_are_crossed_and_values_in_brackets_stay_whole():
    assert probe_plan.candidate_settings(["instance.count=1,2", "hyperparameters.deep_layers=[8,8],[16]"]) == [
        ("instance.count=1", "hyperparameters.deep_layers=[8,8]"),
        ("instance.count=1", "hyperparameters.deep_layers=[16]"),
        ("instance.count=2", "hyperparameters.deep_layers=[8,8]"),
        ("instance.count=2", "hyperparameters.deep_layers=[16]"),
    ]
    assert probe_plan.candidate_settings([], [{"instance.count": 2}, ["a=1", "b=2"], "c=3"]) == [
        ("instance.count=2",),
        ("a=1", "b=2"),
        ("c=3",),
    ]
    assert probe_plan.candidate_settings([], []) == [()]
    with pytest.raises(ValueError, match="expected KEY=V1,V2"):
        probe_plan.candidate_settings(["instance.count"])


def test_a_spec_name_of_the_longest_allowed_length_still_names_every_candidate_a_valid_job(tmp_path):
    name = "d" * 48 + "x"  # 49 characters: the longest name validate lets through
    path = write_spec(tmp_path, {"name": name})
    spec = load_spec(path)
    tries = ["instance.count=" + ",".join(str(n) for n in range(1, 13))]  # 12 candidates: a two-digit suffix

    def compile_candidate(lines, job_name):
        compiled = compile_spec(str(path), lines, job_name)
        return compiled.plan, compiled.errors

    probe = probe_plan.build_probe_plan(spec, compile_candidate, tries=tries)
    assert [c.errors for c in probe.candidates] == [()] * 12
    names = [c.plan.job_name for c in probe.candidates]
    assert max(len(n) for n in names) == 63 and names[11].startswith("ddd") and names[11].endswith("-12")


def test_each_candidate_is_a_capped_tagged_probe_and_refused_ones_keep_the_rules_message(tmp_path):
    probe = build(tmp_path, tries=["hyperparameters.mixed_precision=false,bfloat16"])
    ok, refused = probe.candidates
    assert ok.ok and not refused.ok
    assert any("bfloat16" in error for error in refused.errors)
    plan = ok.plan
    assert plan.job_name == "deepfm-test-probe-x-1" and plan.max_run == 20 * 60
    assert (plan.hyperparameters["max_steps"], plan.hyperparameters["export"], plan.hyperparameters["epochs"]) == (
        300,
        False,
        0,
    )
    assert plan.tags[probe_plan.KIND_TAG] == "probe" and plan.tags[probe_plan.GROUP_TAG] == "deepfm-test-probe-x"
    assert probe.cost_ceiling()["max_usd"] == plan.cost["max_usd"]


def test_the_probe_section_gives_variants_steps_bound_and_data(tmp_path):
    probe = build(
        tmp_path,
        {
            "probe": {
                "variants": [{"instance.count": 2}, ["instance.type=ml.c5.2xlarge"]],
                "max_steps": 40,
                "minutes": 5,
                "max_parallel": 3,
                "data": {"train": "s3://dfm-bucket/small/"},
            }
        },
    )
    assert [c.settings for c in probe.candidates] == [("instance.count=2",), ("instance.type=ml.c5.2xlarge",)]
    first = probe.candidates[0].plan
    assert first.instance_count == 2 and first.max_run == 300 and first.hyperparameters["max_steps"] == 40
    assert [c.uri for c in first.channels if c.name == "train"] == ["s3://dfm-bucket/small/"]
    assert probe.max_parallel == 3
    with pytest.raises(SpecError, match="probe.max_stepz"):
        load_spec(merged(BASE, {"probe": {"max_stepz": 4}}))


def test_a_distribution_change_brings_the_bundled_script_that_runs_it():
    assert probe_plan.follow_distribution(("distribution=horovod",), "deepfm-ps") == (
        "distribution=horovod",
        "entry_point=deepfm-horovod",
    )
    assert probe_plan.follow_distribution(("distribution=none",), "deepfm-ps") == ("distribution=none",)
    assert probe_plan.follow_distribution(("distribution=horovod",), "train.py") == ("distribution=horovod",)


def test_steady_state_drops_the_warm_up_windows():
    lines = [
        "[dfm] train step=10 loss=0.6 auc=0.5 examples_per_sec=50.0",
        "[dfm] train step=20 loss=0.6 auc=0.5 examples_per_sec=1000.0",
        "unrelated",
        "[dfm] train step=30 loss=0.6 auc=0.5 examples_per_sec=500.0",
    ]
    samples = results.train_samples(lines)
    assert samples == {"": [(10, 50.0), (20, 1000.0), (30, 500.0)]}
    assert results.steady_rate(samples[""]) == pytest.approx(2 / (1 / 1000 + 1 / 500))
    assert results.steady_examples_per_sec({"a": [(1, 10.0)], "b": [(1, 20.0), (9, 30.0)]}) == pytest.approx(40.0)
    assert results.steady_examples_per_sec({}) is None


def test_report_ranks_by_cost_per_epoch_marks_the_front_and_recommends(tmp_path):
    probe = build(tmp_path, tries=["instance.count=1,2,4"], rows=3_600_000)
    price = probe.candidates[0].usd_per_hour  # one host's; n hosts cost n times that
    measured = [
        Measurement(1, "Completed", "j1", examples_per_sec=1000.0, utilization={"CPUUtilization": 30.0}),
        Measurement(2, "Completed", "j2", examples_per_sec=2500.0),
        Measurement(3, "Failed", "j3", reason="capacity"),
    ]
    table = results.rows(probe, measured)
    assert [e["candidate"] for e in table] == [2, 1, 3]
    one, two = table[1], table[0]
    assert one["epoch_s"] == 3600 and one["epoch_usd"] == round(price, 4) and one["job_s"] == 3600
    assert two["epoch_s"] == 1440 and two["epoch_usd"] == round(1440 / 3600 * 2 * price, 4)
    assert one["usd_per_million_examples"] == round(price / 3600 / 1000 * 1e6, 4)
    assert "input pipeline" in one["note"] and two["note"] is None
    assert two["pareto"] and not one["pareto"] and table[2]["status"] == "Failed"
    assert results.recommend(table, probe)["set"] == ["instance.count=2"]
    assert results.recommend(table, probe, deadline_h=0.1) is None
    assert results.recommend(table, probe, budget_usd=price)["candidate"] == 2


def test_dry_run_lists_every_request_and_the_cost_ceiling_offline(no_aws_env, no_network, capsys):
    code, out, err = run(
        capsys,
        "probe",
        "configs/ps.yaml",
        "--dry-run",
        "--try",
        "instance.count=1,2",
        "--try",
        "instance.type=ml.c5.9xlarge,ml.c7i.8xlarge",
        "--max-steps",
        "40",
        "--output",
        "json",
    )
    assert code == 0, err
    document = json.loads(out)
    requests = document["requests"]
    assert [r["request"]["ResourceConfig"]["InstanceCount"] for r in requests] == [1, 1, 2, 2]
    assert [r["request"]["ResourceConfig"]["InstanceType"] for r in requests] == ["ml.c5.9xlarge", "ml.c7i.8xlarge"] * 2
    assert all({"Key": "dfm:kind", "Value": "probe"} in r["request"]["Tags"] for r in requests)
    assert {r["request"]["HyperParameters"]["max_steps"] for r in requests} == {"40"}
    assert document["cost_ceiling"]["max_usd"] == pytest.approx(sum(r["cost"]["max_usd"] for r in requests))
    code, out, _ = run(capsys, "probe", "configs/ps.yaml", "--dry-run", "--try", "instance.count=1,2")
    assert code == 0 and "cost ceiling: $" in out
    assert [line for line in out.splitlines() if line != line.rstrip()] == []  # no padding after the last column


def test_every_candidate_refused_is_exit_2_with_the_reasons(tmp_path, no_aws_env, no_network, capsys):
    path = write_spec(tmp_path)
    code, _, err = run(capsys, "probe", path, "--dry-run", "--try", "hyperparameters.mixed_precision=bfloat16")
    assert code == 2 and "refused: candidate 1" in err and "bfloat16" in err and "nothing to probe" in err


def test_the_report_prints_the_table_the_set_lines_the_refused_and_draws_the_front(tmp_path):
    from launcher.cli import probe_report

    probe = build(
        tmp_path, tries=["instance.count=1,2", "hyperparameters.mixed_precision=false,bfloat16"], rows=360_000
    )
    measured = [
        Measurement(1, "Completed", "j1", examples_per_sec=100.0),
        Measurement(3, "Completed", "j3", examples_per_sec=250.0),
    ]
    document = probe_report.report_document(
        probe, measured, local=True, deadline_h=None, budget_usd=None, folder=tmp_path
    )
    document["plot"] = str(probe_report.plot(document, tmp_path / probe_report.PLOT_FILE))
    text = probe_report.render_report(document)

    assert (tmp_path / probe_report.PLOT_FILE).stat().st_size > 0
    assert [e["candidate"] for e in document["candidates"]] == [3, 1]  # 2 and 4 (bfloat16 on c5) refused
    assert [e["candidate"] for e in document["refused"]] == [2, 4]
    assert (
        "recommended (the cheapest per epoch): candidate 3\n  --set instance.count=2\n  --set "
        "hyperparameters.mixed_precision=false" in text
    )
    assert "refused: candidate 2 (instance.count=1 hyperparameters.mixed_precision=bfloat16):" in text
    assert "rank layouts on this machine's" in text and f"plot: {tmp_path}" in text
    assert document["launch"].endswith("--set instance.count=2 --set hyperparameters.mixed_precision=false")


def test_max_steps_changes_the_probes_not_the_recommended_settings():
    from launcher.cli.probe import plan_probe

    probe = plan_probe(
        "configs/ps.yaml",
        ("hyperparameters.batch_size=256",),
        ("instance.count=1,2",),
        rows=None,
        name="deepfm-ps-probe-x",
        local=False,
        probe_overrides=("probe.max_steps=40",),
    )
    assert probe.base_settings == ("hyperparameters.batch_size=256",) and probe.max_steps == 40
    assert {c.plan.hyperparameters["max_steps"] for c in probe.candidates} == {40}
    assert {c.plan.hyperparameters["batch_size"] for c in probe.candidates} == {256}
