"""`dfm probe --local` end to end: two candidates run as local runs on synthetic data (its channels given as
--channel), two refused by the rules; one line per candidate state while it runs, the report's table with each
figure's spread, the recommendation as --set lines (or the tie), a launch line that pastes, the PNG and the refused
candidates with their reasons."""

from __future__ import annotations

import json
import shlex

import pytest
from spec_helpers import LOCAL_BASE, dfm, write_spec

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]


def test_local_probe_of_two_layouts(tmp_path):
    data = tmp_path / "sample"
    synth = dfm(
        "data",
        "synth",
        "--out",
        data,
        "--rows",
        "3000",
        "--files",
        "4",
        "--eval-rows",
        "500",
        "--eval-files",
        "1",
        "--seed",
        "5",
        "--field-size",
        "10",
        "--feature-size",
        "1000",
    )
    assert synth.returncode == 0, synth.stderr
    spec = write_spec(
        tmp_path,
        {
            "name": "probe-e2e",
            "distribution": "parameter_server",
            "data": {"s3_shard": True},
            "hyperparameters": {
                "field_size": 10,
                "feature_size": 1000,
                "batch_size": 128,
                "deep_layers": [16, 16],
                "embedding_size": 4,
                "log_steps": 10,
                "epochs": 2,
            },
            "local": {"run_dir": str(tmp_path / "runs")},
        },
        base=LOCAL_BASE,
    )

    result = dfm(
        "probe",
        spec,
        "--local",
        "--max-steps",
        "40",
        "--rows",
        "3000000",  # an epoch of the full data set: seconds per epoch that round to more than 0.0
        "--name",
        "probe-e2e-t",
        "--try",
        "instance.count=1,2",
        "--try",
        "hyperparameters.mixed_precision=false,bfloat16",
        "--channel",
        f"train={data / 'train'}",
        "--channel",
        f"eval={data / 'eval'}",
        timeout=560,
    )

    out = result.stdout
    assert result.returncode == 0, (out + result.stderr)[-4000:]
    report = json.loads((tmp_path / "runs" / "probe-e2e-t" / "probe.json").read_text())
    assert sorted(e["candidate"] for e in report["candidates"]) == [1, 3]
    assert all(
        e["status"] == "Completed" and e["examples_per_sec"] > 0 and e["epoch_s"] > 0 for e in report["candidates"]
    ), report["candidates"]
    for e in report[
        "candidates"
    ]:  # 40 steps logged every 4: 8 windows after warm-up, the last one holds the evaluation
        assert e["spread"]["low"] <= e["examples_per_sec"] <= e["spread"]["high"]
        assert 4 <= e["spread"]["windows"] <= 7
    assert "train step=" not in out and "[algo-1" not in out  # the processes' lines are in the run folder only
    assert "[dfm probe] candidate 1 (probe-e2e-t-1): running" in out
    assert (tmp_path / "runs" / "probe-e2e-t-1" / "logs" / "dfm-local.log").read_text().startswith("[dfm local]")
    assert [e["candidate"] for e in report["refused"]] == [2, 4]
    assert all("bfloat16" in " ".join(e["errors"]) for e in report["refused"])
    assert (tmp_path / "runs" / "probe-e2e-t" / "probe.png").stat().st_size > 0
    best = report["recommendation"]
    assert "refused: candidate 2" in out and "rank layouts, processes, threads" in out
    if best["candidate"] is None:  # the two layouts could not be told apart on this machine
        assert best["tied"] == [1, 3] and "no recommendation: candidates 1, 3 are indistinguishable" in out
        assert report["launch"] is None
    else:
        assert f"recommended (the fastest here): candidate {best['candidate']}" in out
        assert "  --set instance.count=" in out
        launch = shlex.split(report["launch"])
        assert launch[:3] == ["dfm", "launch", str(spec)] and not any(w.startswith("local.") for w in launch)
    # each candidate's hosts' peak memory: TensorFlow processes, a ps and a script on each host, above 100 MB
    for entry in report["candidates"]:
        hosts = int(entry["instances"].split(" x ")[0])
        assert sorted(entry["memory"]) == [f"algo-{i}" for i in range(1, hosts + 1)]
        assert all(peak > 100 << 20 for peak in entry["memory"].values()), entry["memory"]
        assert f"candidate {entry['candidate']} peak memory per host: algo-1 " in out
