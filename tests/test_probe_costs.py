"""What a probe's measurements cost: spot candidates from their billable time, the full job's time with the
start-up the probe measured, the input-bound note only where CPU says so, and the epoch's rows with their source;
the report's utilization per GPU and per role."""

from __future__ import annotations

import json

from spec_helpers import write_spec
from test_probe import build

from launcher.plans import probe_results as results
from launcher.plans.probe_results import Measurement


def test_spot_candidates_are_costed_from_their_billable_time(tmp_path):
    probe = build(tmp_path, {"spot": {"max_wait": 2400}}, tries=["instance.count=1,2"], rows=3_600_000)
    price = probe.candidates[0].usd_per_hour  # on-demand, one host
    measured = [
        Measurement(1, "Completed", "j1", examples_per_sec=1000.0, billable_s=30, training_s=100),
        Measurement(2, "Completed", "j2", examples_per_sec=1000.0),  # no billable time: the on-demand bound
    ]

    one, two = sorted(results.rows(probe, measured), key=lambda e: e["candidate"])

    assert one["usd_per_hour"] == round(0.3 * price, 3) and one["epoch_usd"] == round(0.3 * price, 4)
    assert one["price_basis"] == "spot: billed 30 s of 100 s trained"
    assert two["usd_per_hour"] == round(2 * price, 3) and two["price_basis"].startswith("on-demand")


def test_on_demand_candidates_keep_the_list_price(tmp_path):
    probe = build(tmp_path, tries=["instance.count=1"], rows=3_600_000)
    (entry,) = results.rows(
        probe, [Measurement(1, "Completed", "j1", examples_per_sec=1000.0, billable_s=30, training_s=100)]
    )
    assert entry["usd_per_hour"] == round(probe.candidates[0].usd_per_hour, 3) and entry["price_basis"] == "on-demand"


def test_the_deadline_counts_the_start_up_the_probe_measured(tmp_path):
    probe = build(tmp_path, tries=["instance.count=1"], rows=3_600_000)
    measured = [Measurement(1, "Completed", "j1", examples_per_sec=1000.0, startup_s=600.0)]
    table = results.rows(probe, measured)
    training_s = 3600 * probe.epochs

    assert table[0]["job_s"] == training_s + 600
    assert results.recommend(table, probe, deadline_h=(training_s + 300) / 3600) is None
    assert results.recommend(table, probe, deadline_h=(training_s + 600) / 3600)["candidate"] == 1


def test_the_input_bound_note_is_never_on_gpu_candidates(tmp_path):
    probe = build(tmp_path, tries=["instance.type=ml.c5.xlarge,ml.g5.xlarge"], rows=3_600_000)
    low_cpu = {"CPUUtilization": 20.0}
    measured = [Measurement(n, "Completed", f"j{n}", examples_per_sec=1000.0, utilization=low_cpu) for n in (1, 2)]

    cpu, gpu = sorted(results.rows(probe, measured), key=lambda e: e["candidate"])

    assert "input pipeline" in cpu["note"] and gpu["note"] is None


def test_rows_say_where_they_came_from(tmp_path):
    from launcher.cli import probe_report

    stats = (5000, "the statistics beside the local train channel data/train")
    sample = {"probe": {"data": {"train": "s3://dfm-bucket/sample/"}}}
    probe = build(tmp_path, sample, stats_rows=stats)
    assert probe.rows == 5000
    assert probe.rows_source == (
        "the statistics beside the local train channel data/train, not the sample the probe reads "
        "(s3://dfm-bucket/sample/)"
    )
    assert build(tmp_path, stats_rows=stats).rows_source == stats[1]  # no sample: the channel's own count
    from_spec = build(tmp_path, {"probe": {"rows": 7000}}, stats_rows=stats)
    assert (from_spec.rows, from_spec.rows_source) == (7000, "probe.rows")
    assert build(tmp_path, sample, rows=9000, stats_rows=stats).rows_source == "--rows"
    document = probe_report.report_document(probe, [], local=False, deadline_h=None, budget_usd=None, folder=tmp_path)
    assert f"rows of one epoch: 5,000 from {probe.rows_source}" in probe_report.render_report(document)


def test_the_cli_reads_rows_from_the_local_channels_statistics_and_says_so(tmp_path):
    from launcher.cli.probe import plan_probe

    (tmp_path / "prepare").mkdir()
    (tmp_path / "prepare" / "stats.json").write_text(json.dumps({"rows": 4321}))
    train = tmp_path / "train"
    path = write_spec(
        tmp_path, {"local": {"channels": {"train": str(train)}}, "probe": {"data": {"train": "s3://dfm-bucket/s/"}}}
    )

    probe = plan_probe(str(path), (), ("instance.count=1",), rows=None, name="deepfm-test-probe-x", local=False)

    assert probe.rows == 4321
    assert probe.rows_source == (
        f"the statistics beside the local train channel {train}, not the sample the probe reads (s3://dfm-bucket/s/)"
    )


def test_the_report_shows_per_gpu_and_ps_utilization_and_the_spot_price_basis(tmp_path):
    from launcher.cli import probe_report

    probe = build(tmp_path, {"spot": {"max_wait": 2400}}, tries=["instance.count=1"], rows=3_600_000)
    measured = Measurement(
        1,
        "Completed",
        "j1",
        examples_per_sec=1000.0,
        billable_s=30,
        training_s=100,
        utilization={"CPUUtilization": 15.0, "GPUUtilization": 80.0},
        ps_utilization={"CPUUtilization": 90.0},
    )
    document = probe_report.report_document(
        probe, [measured], local=False, deadline_h=None, budget_usd=None, folder=tmp_path
    )

    text = probe_report.render_report(document)

    assert "GPU 80%" in text and "ps 90%" in text
    assert "candidate 1 $/h: spot: billed 30 s of 100 s trained" in text
    assert document["candidates"][0]["ps_utilization"] == {"CPUUtilization": 90.0}
