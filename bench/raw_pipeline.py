"""Raw-text input pipeline records/s: criteo-tsv lines parsed batch-first and transformed in the graph
(bucketize 13 counts, hash 26 categoricals and a multi-hot bag) by `entrypoints/deepfm_raw.py`."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from bench.common import add_table, alternate, fmt, median, seconds, section, use_entrypoints, verdict

BATCHES = (1024, 4096)
BAG = "recent_cats"


def _features(columns: list[str], boundaries: list[int]) -> dict:
    return {
        "format": "tsv",
        "label": "clicked",
        "columns": columns,
        "numeric": {c: {"transform": "bucketize", "boundaries": boundaries} for c in columns if c[0] == "i"},
        "categorical": {c: {"hash_buckets": 1 << 20} for c in columns if c[0] == "c" and c != "clicked"},
        "multi_hot": {BAG: {"separator": "|", "hash_buckets": 1 << 17, "max_length": 20}},
    }


def write_data(folder: Path, rows: int, files: int = 8) -> tuple[list[str], dict]:
    """criteo-tsv synth rows with blanks and a bag -> (file paths, a features mapping for them)."""
    from launcher.data import raw, stream, synth, synth_rows

    generator = synth.Generator(11, missing_rate=0.05, multi_hot=synth_rows.MultiHot())
    stream.write_parts(generator, [(folder, rows, files)], fmt="criteo-tsv")
    layout = generator.layout
    columns = raw.column_names(layout.numeric_fields, len(layout.sizes) - layout.numeric_fields, BAG)
    boundaries = [2**k - 1 for k in range(1, synth_rows.NUMERIC_BUCKETS)]
    return sorted(str(p) for p in folder.iterdir()), _features(columns, boundaries)


def _drain(dataset) -> int:
    return sum(int(labels.shape[0]) for _, labels in dataset)


def rates(files: list[str], features: dict, rows: int, repetitions: int) -> dict:
    """records/s per (bad_rows policy, batch size, work): the bundled raw_dataset, parsed only or parsed
    and transformed; under fail each line travels with its file's name (for the error)."""
    use_entrypoints()
    import deepfm_features as F
    import deepfm_raw as R

    def run(policy: str, batch: int, transformed: bool):
        spec = F.spec_from_dict(dict(features, bad_rows=policy))
        dataset = R.raw_dataset(files, spec, batch, transform=R.FeatureTransform(spec) if transformed else None)
        return lambda: rows / seconds(lambda: _drain(dataset))

    contenders = {}
    for batch in BATCHES:
        contenders[("skip", batch, "parse + transform")] = run("skip", batch, True)
        contenders[("skip", batch, "parse only")] = run("skip", batch, False)
        contenders[("fail", batch, "parse + transform")] = run("fail", batch, True)
    for contender in contenders.values():  # trace every function once before timing
        contender()
    return {key: median(values) for key, values in alternate(contenders, repetitions).items()}


def measure(quick: bool, context: dict) -> dict:
    rows = 65_536 if quick else 262_144
    repetitions = context.get("repetitions") or (3 if quick else 5)
    result = section(
        "Raw-text pipeline",
        "parse + hash at least 1.5x the training rate on 2 cores",
        f"criteo-tsv synth, {rows:,} rows in 8 files (13 counts, 26 hex categoricals, a bag of up "
        "to 20 tokens, 5% blanks), drained in Python; `bench/raw_pipeline.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-raw-"))
    try:
        files, features = write_data(work / "train", rows)
        measured = rates(files, features, rows, repetitions)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    training = context.get("training", {}).get("best_bundled_examples_per_s")
    add_table(
        result,
        ["bad_rows", "batch", "work", "records/s (median)", "margin over training"],
        [
            [policy, batch, work_done, fmt(rate), fmt(rate / training, 1) + "x" if training else "n/a"]
            for (policy, batch, work_done), rate in measured.items()
        ],
    )
    judged = min(
        rate
        for (policy, _, work_done), rate in measured.items()
        if policy == "skip" and work_done == "parse + transform"
    )
    if training:
        verdict(
            result,
            "raw pipeline >= 1.5x training",
            judged >= 1.5 * training,
            f"slowest parse + transform (bad_rows: skip): {fmt(judged)} records/s = {fmt(judged / training, 1)}x "
            f"the fastest training rate ({fmt(training)} examples/s)",
        )
    else:
        verdict(
            result,
            "raw pipeline >= 1.5x training",
            None,
            f"slowest parse + transform (bad_rows: skip): {fmt(judged)} records/s; item 1 gave no training rate",
        )
    result["data"] = {"records_per_s": {f"{r} / {b} / {w}": v for (r, b, w), v in measured.items()}}
    return result


if __name__ == "__main__":  # python -m bench.raw_pipeline [--quick]
    import json
    import sys

    from bench.common import quiet_tensorflow

    quiet_tensorflow()
    print(json.dumps(measure("--quick" in sys.argv, {})["data"], indent=2))
