"""Item: model quality. Eval AUC per epoch of dfm's recipe (the bundled scripts with their defaults, as
`dfm launch --local` runs them) on the demo sample, on the raw sample and on a sample unlike both (8 fields,
80k rows, small vocabularies, 55% positives, labels partly from a deep teacher no FM holds), beside
logistic regression (scikit-learn) and DeepCTR's DeepFM on the same split, all in one run: a quality
regression shows here the way a speed regression shows in the other items. Variants turn one default at
a time off (or back to its old value), so each default's effect is measured on more than the demo's data.

`DFM_BENCH_QUALITY_SAMPLES=deep8` (comma-separated names) runs only those samples.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from bench.baseline import MAX_GAP, tuned_sklearn
from bench.common import DFM, REPO, add_table, fmt, section, synth, verdict, versions
from bench.quality_baselines import (
    LR_C,
    deepctr_per_epoch,
    indexed,
    logistic_regression,
    one_hot,
    one_hot_ids,
    tokens,
    weighted,
)

# The samples as `make demo` and configs/criteo-raw.yaml's comment make them, and the epochs dfm trains on
# each (the config's own: configs/ps.yaml 4, configs/criteo-raw.yaml 5). deep8: far from the demo's layout
# (8 categorical fields of 3,000 ids, 80k rows, 55% positives) with half the teacher's logit from a ReLU network
# over the latent vectors, trained as DeepCTR's examples train (embedding 8, MLP 256-128-64, Adam 1e-3, batch
# 256, 4 epochs; every other hyperparameter the scripts' default) on one host.
DEEP8_HPS = {
    "field_size": 8,
    "feature_size": 3000,
    "embedding_size": 8,
    "deep_layers": "[256,128,64]",
    "optimizer": "adam",
    "learning_rate": 0.001,
    "batch_size": 256,
}
SAMPLES = {
    "demo": ("configs/ps.yaml", ["--rows", "200000", "--files", "8", "--eval-rows", "40000", "--seed", "7"], 4, []),
    "raw": (
        "configs/criteo-raw.yaml",
        [
            "--format",
            "criteo-tsv",
            "--multi-hot",
            "recent_cats",
            "--rows",
            "200000",
            "--eval-rows",
            "20000",
            "--files",
            "4",
        ],
        5,
        [],
    ),
    "deep8": (
        "configs/ps.yaml",
        [
            "--rows",
            "80000",
            "--files",
            "2",
            "--eval-rows",
            "20000",
            "--seed",
            "11",
            "--field-size",
            "8",
            "--numeric-fields",
            "0",
            "--feature-size",
            "3000",
            "--positive-rate",
            "0.55",
            "--signal",
            "2.5",
            "--deep-share",
            "0.5",
        ],
        4,
        [
            "instance.count=1",
            "distribution=none",
            "hyperparameters.local_steps=1",  # ps.yaml's local steps are for Adagrad on a parameter server
            *(f"hyperparameters.{k}={v}" for k, v in DEEP8_HPS.items()),
        ],
    ),
}
OLD_L2_DENSE = ("the same with l2_dense 0.03", ["hyperparameters.l2_dense=0.03"])
# Variants of a sample's recipe run beside it (label, --set items): what a changed default bought.
VARIANTS = {
    "demo": [
        (
            "the same with the scripts' default optimizer (lazy Adam 0.002)",
            ["hyperparameters.optimizer=adam", "hyperparameters.learning_rate=0.002", "hyperparameters.local_steps=1"],
        ),
        OLD_L2_DENSE,
    ],
    "raw": [
        (
            "the same, counts as log1p (dfm data inspect's proposal before powers-of-two buckets)",
            [f"features.numeric.i{k}={{transform: log1p}}" for k in range(1, 14)],
        ),
        OLD_L2_DENSE,
    ],
    "deep8": [
        OLD_L2_DENSE,
        ("the same with dropout 0 (default 0.2)", ["hyperparameters.dropout=0"]),
        ("the same with l2_reg 0 (default 1e-5)", ["hyperparameters.l2_reg=0"]),
    ],
}
# The recipe in float32, and again in bfloat16 on a CPU that has it (`auto` picks bfloat16 there).
# bfloat16 needs an instance type with it (dfm validate): locally the type changes nothing else (CPUs are this
# machine's).
FLOAT32 = "hyperparameters.mixed_precision=false"
BFLOAT16 = ["hyperparameters.mixed_precision=bfloat16", "instance.type=ml.c7i.16xlarge"]
BF16_AUC_GAP = 0.003
# A default must not cost more than this against the same run with it turned off (deep8's variants).
DEFAULT_COST = 0.003
EPOCHS = max(epochs for _, _, epochs, _ in SAMPLES.values())  # the table's epoch columns; DeepCTR runs 3
# DeepCTR's DeepFM twice: a 400x3 MLP with no dropout (the seed sample's settings), and dfm's
# recipe (the scripts' defaults) carried over to DeepCTR's own arguments.
DEEPCTR = {
    "DeepCTR DeepFM, MLP 400x3, Adam 1e-3, batch 1024": dict(
        layers=(400, 400, 400), dropout=0.0, l2_dnn=0.0, lr=1e-3, batch=1024
    ),
    "DeepCTR DeepFM, dfm's recipe (MLP 64x32, dropout 0.2, Adam 2e-3, batch 512)": dict(
        layers=(64, 32), dropout=0.2, l2_dnn=0.0, lr=2e-3, batch=512
    ),
}
# deep8: DeepCTR with the settings its run uses (its own defaults otherwise: no dropout, no L2 on the MLP)
DEEPCTR_DEEP8 = {
    "DeepCTR DeepFM, MLP 256x128x64, Adam 1e-3, batch 256": dict(
        layers=(256, 128, 64), dropout=0.0, l2_dnn=0.0, lr=1e-3, batch=256
    )
}


def _launch(config: str, sets: list[str], channels: dict[str, Path], run_dir: Path):
    argv = [DFM, "launch", config, "--local", "--run-dir", str(run_dir), "--timeout", "1800"]
    for item in sets:
        argv += ["--set", item]
    for name, path in channels.items():
        argv += ["--channel", f"{name}={path}"]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=1900)


def dfm_per_epoch(
    config: str, epochs: int, sample: Path, run_dir: Path, sets: list[str] = (), baseline: list | None = None
) -> tuple[list[float], float, str]:
    """`dfm launch <config> --local` for `epochs` epochs on the sample with the config's recipe ->
    (eval AUC after each epoch, the final (exported model's) AUC, failure or ''); `baseline`, a list, gets the
    scripts' logistic-regression baseline's eval AUC after each epoch."""
    from launcher.metric_lines import parse_metric_line

    done = _launch(
        config,
        [f"hyperparameters.epochs={epochs}", *sets],
        {"train": sample / "train", "eval": sample / "eval"},
        run_dir,
    )
    evals = [
        parsed[1]
        for parsed in map(parse_metric_line, done.stdout.splitlines())
        if parsed is not None and parsed[0] == "eval"
    ]
    if done.returncode != 0 or not evals:
        errors = [line for line in (done.stdout + done.stderr).splitlines() if "error" in line.lower()]
        return [], float("nan"), f"exit {done.returncode}: {(errors or ['no error line'])[-1][:200]}"
    per_epoch = evals[:epochs] if len(evals) > epochs else evals  # the last line repeats the best one
    if baseline is not None:
        baseline += [row["baseline_auc"] for row in per_epoch if "baseline_auc" in row]
    return [row["auc"] for row in per_epoch], evals[-1]["auc"], ""


def _epochs(aucs: list[float]) -> list[str]:
    """A row's epoch columns: the AUCs it has, blank after."""
    return [fmt(a, 4) for a in aucs] + [""] * (EPOCHS - len(aucs))


def _samples() -> dict:
    names = [n.strip() for n in os.environ.get("DFM_BENCH_QUALITY_SAMPLES", "").split(",") if n.strip()]
    return {name: SAMPLES[name] for name in names} if names else SAMPLES


def measure(quick: bool, context: dict) -> dict:
    result = section(
        "Model quality on the samples",
        "dfm's recipe (the config's) ends >= logistic regression's eval AUC and >= its own first epoch; on deep8 "
        f"no regularization default costs more than {DEFAULT_COST} AUC against the same run without it",
        "`dfm data synth` as `make demo` and configs/criteo-raw.yaml make the samples, deep8 as SAMPLES in "
        "bench/quality.py; dfm: `dfm launch <config> --local --set hyperparameters.epochs=N` (demo 4, raw 5: the "
        "configs' own; deep8 4, on configs/ps.yaml set to one host and DeepCTR's settings); logistic regression "
        f"(scikit-learn, C={LR_C}) on one-hot ids; DeepCTR's DeepFM on the same split; `bench/quality.py`",
    )
    work = Path(tempfile.mkdtemp(prefix="dfm-bench-quality-"))
    (work / "runs").mkdir()
    from bench.training import cpu_bfloat16

    bf16_flag = cpu_bfloat16()
    rows, data = [], {}
    try:
        for name, (config, _, epochs, base_sets) in _samples().items():
            sample = synth(work / name, *SAMPLES[name][1])
            meta = json.loads((sample / "meta.json").read_text())
            ceiling = meta["eval_teacher_auc"]
            if name != "raw":
                fields = meta["field_size"]
                (tr_ids, _, tr_y), (ev_ids, _, ev_y) = (indexed(sample / part, fields) for part in ("train", "eval"))
                tr_x, ev_x = one_hot_ids(tr_ids, ev_ids)
            else:
                (tr_s, tr_b, tr_y), (ev_s, ev_b, ev_y) = tokens(sample / "train"), tokens(sample / "eval")
                tr_x, vocabulary = one_hot(weighted(tr_s, tr_b))
                ev_x, _ = one_hot(weighted(ev_s, ev_b), vocabulary)
                per_field: list[dict] = [{} for _ in range(39)]
                tr_ids, ev_ids = (
                    np.asarray(
                        [[per_field[f].setdefault(t, len(per_field[f])) for f, t in enumerate(row)] for row in rows],
                        np.int64,
                    )
                    for rows in (tr_s, ev_s)
                )
            lr_auc = logistic_regression(tr_x, tr_y, ev_x, ev_y)
            ours_lr: list[float] = []
            ours, final, failure = dfm_per_epoch(
                config, epochs, sample, work / "runs" / name, [*base_sets, FLOAT32], baseline=ours_lr
            )
            rows.append(
                [
                    name,
                    f"dfm recipe ({config}{', set as above' if base_sets else ''}), `dfm launch --local`, float32",
                    *_epochs(ours),
                    fmt(final, 4) if not failure else f"not run: {failure}",
                ]
            )
            bf16 = None
            if bf16_flag:
                bf16, bf16_final, bf16_failure = dfm_per_epoch(
                    config, epochs, sample, work / "runs" / f"{name}-bf16", [*base_sets, *BFLOAT16]
                )
                rows.append(
                    [
                        name,
                        "the same in bfloat16 (`mixed_precision: bfloat16`)",
                        *_epochs(bf16),
                        fmt(bf16_final, 4) if not bf16_failure else f"not run: {bf16_failure}",
                    ]
                )
                gap = abs(bf16_final - final) if bf16 and ours else float("nan")
                verdict(
                    result,
                    f"{name}: bfloat16 within {BF16_AUC_GAP} of float32's final eval AUC",
                    gap <= BF16_AUC_GAP if gap == gap else None,
                    bf16_failure or failure or f"bfloat16 {bf16_final:.4f}, float32 {final:.4f}: {gap:.4f} apart",
                )
            variants = {}
            for label, sets in VARIANTS.get(name, []):
                aucs, best, failed = dfm_per_epoch(
                    config, epochs, sample, work / "runs" / f"{name}-variant", [*base_sets, *sets]
                )
                rows.append([name, label, *_epochs(aucs), fmt(best, 4) if not failed else f"not run: {failed}"])
                variants[label] = None if failed else best
            rows.append([name, f"logistic regression, one-hot (C={LR_C})", *_epochs([]), fmt(lr_auc, 4)])
            if ours_lr and name != "raw":  # raw: the scripts hash what scikit-learn one-hot encodes
                tuned_auc, tuned_c = tuned_sklearn(sample, meta["field_size"])
                rows.append([name, "the scripts' logistic-regression baseline (`baseline`)", *_epochs(ours_lr), ""])
                rows.append(
                    [
                        name,
                        f"logistic regression, weighted one-hot, tuned (C={tuned_c})",
                        *_epochs([]),
                        fmt(tuned_auc, 4),
                    ]
                )
                verdict(
                    result,
                    f"{name}: the scripts' baseline within {MAX_GAP} of a tuned scikit-learn logistic regression",
                    abs(ours_lr[-1] - tuned_auc) <= MAX_GAP,
                    f"baseline {ours_lr[-1]:.4f} after {len(ours_lr)} epochs, "
                    f"scikit-learn {tuned_auc:.4f} (C={tuned_c})",
                )
            for label, settings in (DEEPCTR_DEEP8 if name == "deep8" else DEEPCTR).items():
                try:
                    aucs = deepctr_per_epoch(tr_ids, tr_y, ev_ids, ev_y, settings, epochs=3 if name != "deep8" else 4)
                    rows.append([name, label, *_epochs(aucs), ""])
                except Exception as err:  # reported, never replaced by a number
                    rows.append([name, label, *_epochs([]), f"not run: {type(err).__name__}: {err}"[:200]])
            rows.append(
                [
                    name,
                    f"the planted teacher: a ceiling no model reaches from {meta['rows']:,} rows",
                    *_epochs([]),
                    fmt(ceiling, 4),
                ]
            )
            data[name] = {
                "dfm_per_epoch": ours,
                "dfm_final": final,
                "dfm_bfloat16_per_epoch": bf16,
                "logistic_regression": lr_auc,
                "teacher": ceiling,
                "failure": failure,
                "variants": variants,
            }
            met = bool(ours) and final >= lr_auc and final >= ours[0]
            verdict(
                result,
                f"{name}: dfm after {epochs} epochs >= logistic regression and >= its epoch 1",
                met if ours else None,
                failure
                or f"dfm final {final:.4f} (epochs {', '.join(f'{a:.4f}' for a in ours)}) vs "
                f"logistic regression {lr_auc:.4f}",
            )
            if name == "deep8" and ours:
                best_without = max((v for v in variants.values() if v is not None), default=float("nan"))
                verdict(
                    result,
                    f"deep8: the defaults >= every variant - {DEFAULT_COST}",
                    bool(variants) and final >= best_without - DEFAULT_COST,
                    f"defaults {final:.4f}; "
                    + ", ".join(
                        f"{label.split(' (')[0].replace('the same with ', '')} {fmt(v, 4)}"
                        for label, v in variants.items()
                    ),
                )
    finally:
        shutil.rmtree(work, ignore_errors=True)
    add_table(
        result,
        ["sample", "model", *[f"epoch {e}" for e in range(1, EPOCHS + 1)], "final (exported) / AUC"],
        rows,
        "Eval AUC:",
    )
    result["notes"] += [
        "dfm's final AUC is that of the exported model: `best_of: eval:auc` (the default) keeps the model of the "
        "best evaluation, and the run repeats that evaluation's metric line last.",
        "Precision: the recipe runs with `mixed_precision: false` (float32), and on a CPU with bfloat16 instructions "
        f"(here: {bf16_flag or 'none'}) again with `bfloat16` (the MLP's training steps in bfloat16; evaluation and "
        "the "
        "export compute in float32). The variants run in the default `auto`.",
        f"deep8: `dfm data synth {' '.join(SAMPLES['deep8'][1])}` (half the teacher's logit from a ReLU network over "
        "the latent vectors: the MLP has something to learn that no FM holds), trained with "
        + ", ".join(f"{k} {v}" for k, v in DEEP8_HPS.items())
        + " and the scripts' other defaults, on one host.",
        "Raw sample: logistic regression one-hot encodes each column's value (the multi-hot column's ids "
        "weighted 1/length, its mean); DeepCTR gets one field per single-valued column (the multi-hot column "
        "left out) and each field's values indexed in order of appearance.",
        f"DeepCTR {versions(('deepctr',))['deepctr']}: embedding 8, l2_reg_embedding 1e-5, stepped one epoch at a time "
        "through `make_train_function` (its `fit` fails on TF 2.14), "
        "seed 0; the teacher is the sample's planted model (meta.json's eval_teacher_auc).",
    ]
    result["data"] = data
    return result
