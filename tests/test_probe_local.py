"""`dfm probe --local` end to end: two candidates run as local runs on synthetic data, two refused by the rules; the
report's table, the recommendation as --set lines, the PNG and the refused candidates with their reasons."""

from __future__ import annotations

import json

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
            "local": {
                "channels": {"train": str(data / "train"), "eval": str(data / "eval")},
                "run_dir": str(tmp_path / "runs"),
            },
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
        "3000",
        "--name",
        "probe-e2e-t",
        "--try",
        "instance.count=1,2",
        "--try",
        "hyperparameters.mixed_precision=false,bfloat16",
        timeout=560,
    )

    out = result.stdout
    assert result.returncode == 0, (out + result.stderr)[-4000:]
    report = json.loads((tmp_path / "runs" / "probe-e2e-t" / "probe.json").read_text())
    assert sorted(e["candidate"] for e in report["candidates"]) == [1, 3]
    assert all(
        e["status"] == "Completed" and e["examples_per_sec"] > 0 and e["epoch_s"] > 0 for e in report["candidates"]
    )
    assert [e["candidate"] for e in report["refused"]] == [2, 4]
    assert all("bfloat16" in " ".join(e["errors"]) for e in report["refused"])
    assert (tmp_path / "runs" / "probe-e2e-t" / "probe.png").stat().st_size > 0
    best = report["recommendation"]
    assert f"recommended (the cheapest per epoch): candidate {best['candidate']}" in out
    assert "  --set instance.count=" in out and "refused: candidate 2" in out and "rank layouts on this machine" in out
    # each candidate's hosts' peak memory: TensorFlow processes, a ps and a script on each host, above 100 MB
    for entry in report["candidates"]:
        hosts = int(entry["instances"].split(" x ")[0])
        assert sorted(entry["memory"]) == [f"algo-{i}" for i in range(1, hosts + 1)]
        assert all(peak > 100 << 20 for peak in entry["memory"].values()), entry["memory"]
        assert f"candidate {entry['candidate']} peak memory per host: algo-1 " in out
