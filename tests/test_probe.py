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


def _train(step: int, speed: float) -> str:
    return f"[dfm] train step={step} loss=0.6 auc=0.5 examples_per_sec={speed}"


def test_steady_state_is_the_median_of_the_clean_windows_after_warm_up_with_their_spread():
    lines = [
        _train(10, 50.0),  # the first window: warm-up
        _train(20, 900.0),  # within the first fifth of 100 steps: warm-up
        _train(30, 1000.0),
        _train(40, 1100.0),
        "[dfm] eval step=40 loss=0.6 auc=0.5",  # an evaluation after step 40: windows (30, 40] and (40, 50] left out
        _train(50, 300.0),
        _train(60, 1200.0),
        "[dfm] checkpoint step=65 /opt/ml/checkpoints/ckpt-2",  # inside (60, 70]
        _train(70, 200.0),
        _train(80, 1300.0),
        "[dfm] epoch 1/0 done at step 85",  # the data ended inside (80, 90]
        _train(90, 100.0),
        "unrelated",
        _train(100, 1400.0),
    ]
    samples = results.train_samples(lines)
    assert samples[""][:3] == [(10, 50.0), (20, 900.0), (30, 1000.0)] and (40, None) in samples[""]
    assert results.clean_windows(samples[""]) == ([1000.0, 1200.0, 1300.0, 1400.0], 4, 8)
    measured = results.steady_throughput(samples)
    assert (measured.median, measured.low, measured.high, measured.windows, measured.left_out) == (
        1250.0,
        1000.0,
        1400.0,
        4,
        4,
    )
    assert measured.q1 == pytest.approx(1150.0) and measured.q3 == pytest.approx(1325.0) and measured.reason is None
    # processes that each report their own share are summed; other work seen by one process cuts every process's window
    two = results.steady_throughput(
        {"a": [(s, 10.0) for s in range(10, 110, 10)], "b": [(s, 20.0) for s in range(10, 110, 10)] + [(55, None)]}
    )
    assert (two.median, two.low, two.high, two.windows, two.left_out) == (30.0, 30.0, 30.0, 7, 2)


def test_a_figure_needs_min_windows_after_warm_up_else_not_measured_with_the_reason(tmp_path):
    one_line = results.steady_throughput({"": [(60, 1234.0)]})  # docs' --max-steps 60 with log_steps 100
    assert one_line.median is None and results.steady_examples_per_sec({"": [(60, 1234.0)]}) is None
    assert f"need {results.MIN_WINDOWS}" in one_line.reason and "raise --max-steps or lower" in one_line.reason
    evaluated = [(s, 100.0) for s in range(10, 110, 10)] + [(s, None) for s in (35, 45, 55, 75, 95)]
    short = results.steady_throughput({"algo-1": evaluated})
    assert short.median is None and short.reason.startswith("algo-1: ") and "held an evaluation" in short.reason
    assert results.steady_throughput({}).reason

    probe = build(tmp_path, rows=1000)
    table = results.rows(probe, [Measurement(1, "Completed", "j1", throughput=one_line)])
    assert table[0]["status"] == "not measured" and table[0]["reason"] == one_line.reason
    assert results.recommend(table, probe) is None


def test_a_candidate_that_did_not_complete_is_never_ranked_first_on_the_front_or_recommended(tmp_path):
    probe = build(tmp_path, tries=["instance.count=1,2,4"], rows=3_600_000)
    measured = [
        Measurement(1, "Completed", "j1", examples_per_sec=1000.0),
        Measurement(2, "Failed", "j2", reason="OutOfMemory", examples_per_sec=9000.0),
        Measurement(3, "Stopped", "j3", examples_per_sec=50000.0),
    ]
    for local in (False, True):
        table = results.rows(probe, measured, local=local)
        assert [e["candidate"] for e in table][0] == 1
        assert [e["candidate"] for e in table if e["pareto"]] == [1]
        assert [e["examples_per_sec"] for e in table if e["candidate"] != 1] == [None, None]
        for options in ({}, {"deadline_h": 100.0}, {"budget_usd": 1e6}):
            assert results.recommend(table, probe, local=local, **options)["candidate"] == 1


def test_a_local_probe_ranks_what_it_can_and_never_recommends_an_instance_type(tmp_path):
    probe = build(
        tmp_path,
        tries=["hyperparameters.batch_size=256,4096", "instance.type=ml.c5.2xlarge,ml.c5.4xlarge"],
        rows=1_000_000,
    )

    def measured(number, median, low, high):
        spread = results.Throughput(median, low, high, low, high, 6)
        return Measurement(number, "Completed", f"j{number}", examples_per_sec=median, throughput=spread)

    runs = [measured(1, 10_000, 9_000, 11_000), measured(2, 11_500, 10_500, 12_000)]  # batch 256: one machine, twice
    runs += [measured(3, 40_000, 36_000, 44_000), measured(4, 38_000, 35_000, 42_000)]  # batch 4096
    table = results.rows(probe, runs, local=True)
    assert [e["candidate"] for e in table] == [3, 4, 2, 1]  # fastest first, whatever the instances' prices
    assert results.indistinguishable_groups(table) == [[1, 2], [3, 4]]
    assert {e["candidate"]: e["same_as"] for e in table} == {1: [2], 2: [1], 3: [4], 4: [3]}
    best = results.recommend(table, probe, local=True)
    assert best["candidate"] == 3 and best["set"] == ["hyperparameters.batch_size=4096"]
    assert best["not_told_apart"] == ["instance.type"] and best["tied"] == [3, 4]
    # the same figures on SageMaker are prices of different hardware: the cheapest per epoch stays the answer
    assert "instance.type=ml.c5.2xlarge" in results.recommend(results.rows(probe, runs), probe)["set"]

    layouts = build(tmp_path, tries=["instance.count=1,2"], rows=1_000_000)
    tie = results.recommend(
        results.rows(layouts, [measured(1, 10_000, 9_000, 11_000), measured(2, 10_400, 9_500, 11_500)], local=True),
        layouts,
        local=True,
    )
    assert tie["candidate"] is None and tie["set"] is None and tie["differing"] == ["instance.count"]
    assert tie["tied"] == [1, 2]
    from launcher.cli import probe_report

    document = probe_report.report_document(
        layouts,
        [measured(1, 10_000, 9_000, 11_000), measured(2, 10_400, 9_500, 11_500)],
        local=True,
        deadline_h=None,
        budget_usd=None,
        folder=tmp_path,
    )
    text = probe_report.render_report(document)
    assert document["launch"] is None and document["indistinguishable"] == [[1, 2]]
    assert "no recommendation: candidates 1, 2 are indistinguishable here and differ in instance.count" in text
    assert "10,400 (9,500-11,500)" in text and "launch it" not in text
    # medians 10% apart or more, ranges apart: told apart
    apart = [measured(1, 10_000, 9_500, 10_500), measured(2, 12_000, 11_000, 13_000)]
    assert results.recommend(results.rows(layouts, apart, local=True), layouts, local=True)["set"] == [
        "instance.count=2"
    ]


def test_the_launch_line_pastes_quoted_without_local_settings(tmp_path):
    import shlex

    from launcher.cli import probe_report

    (tmp_path / "my specs").mkdir()
    spec = write_spec(tmp_path / "my specs")
    probe = build(tmp_path, tries=["hyperparameters.deep_layers=[64, 32],[16]"], rows=1000)
    probe = type(probe)(
        **{
            **probe.__dict__,
            "spec_path": str(spec),
            "base_settings": ("local.channels={train: /data/a b, eval: /data/e}", "hyperparameters.batch_size=64"),
        }
    )
    document = probe_report.report_document(
        probe,
        [
            Measurement(1, "Completed", "j1", examples_per_sec=500.0),
            Measurement(2, "Completed", "j2", examples_per_sec=90.0),
        ],
        local=False,
        deadline_h=None,
        budget_usd=None,
        folder=tmp_path,
    )
    assert shlex.split(document["launch"]) == [
        "dfm",
        "launch",
        str(spec),
        "--set",
        "hyperparameters.batch_size=64",
        "--set",
        "hyperparameters.deep_layers=[64, 32]",
    ]
    assert "--set 'hyperparameters.deep_layers=[64, 32]'" in probe_report.render_report(document)


def test_probe_takes_channels_as_launch_does_and_keeps_them_out_of_the_recommendation(
    tmp_path, no_aws_env, no_network, capsys
):
    spec = write_spec(tmp_path)
    train = tmp_path / "train data"
    train.mkdir()
    (train / "part-0.csv").write_text("0,1:1\n")
    code, out, err = run(
        capsys,
        "probe",
        spec,
        "--local",
        "--dry-run",
        "--channel",
        f"train={train}",
        "--try",
        "instance.count=1,2",
        "-o",
        "json",
    )
    assert code == 0, err
    runs = json.loads(out)["runs"]
    assert len(runs) == 2 and all(str(train) in json.dumps(r) for r in runs)
    code, _, err = run(capsys, "probe", spec, "--dry-run", "--channel", f"train={train}")
    assert code == 2 and "--channel applies to --local" in err
    code, _, err = run(capsys, "probe", spec, "--local", "--dry-run", "--channel", "train")
    assert code == 2 and "expected NAME=PATH" in err


def test_a_bundled_scripts_probe_logs_often_enough_and_evaluates_and_checkpoints_after_its_timed_windows(tmp_path):
    plan = build(tmp_path).candidates[0].plan
    assert (plan.hyperparameters["log_steps"], plan.hyperparameters["eval_steps"]) == (30, 301)
    assert plan.hyperparameters["checkpoint_steps"] == 300
    assert probe_plan.timed_windows(60) == [
        "hyperparameters.log_steps=6",
        "hyperparameters.eval_steps=61",
        "hyperparameters.checkpoint_steps=60",
        "hyperparameters.line_barrier=true",
    ]
    assert probe_plan.timed_windows(300, log_steps=10)[0] == "hyperparameters.log_steps=10"
    assert probe_plan.timed_windows(5)[0] == "hyperparameters.log_steps=1"


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
        "recommended (the fastest here): candidate 3\n  --set instance.count=2\n  --set "
        "hyperparameters.mixed_precision=false" in text
    )
    assert "refused: candidate 2 (instance.count=1 hyperparameters.mixed_precision=bfloat16):" in text
    assert "rank layouts, processes, threads and batch sizes" in text and f"plot: {tmp_path}" in text
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
