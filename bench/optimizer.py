"""Item 2: does a training step cost follow the batch or the embedding table? 100k vs 1M rows, dense vs
sparse embedding updates, with Adam (the optimizer whose dense form touches every row every step)."""

from __future__ import annotations

import gc

import numpy as np

from bench.common import add_table, alternate, fmt, median, section, verdict
from bench.contenders import bundled, synthetic

VOCABULARIES = (100_000, 1_000_000)
SPARSE_GROWTH_LIMIT = 1.25  # 10x the rows may cost at most this much more per step on the sparse path


def measure(quick: bool, context: dict) -> dict:
    repetitions = context.get("repetitions") or (3 if quick else 7)
    batches = (512,) if quick else (512, 4096)
    result = section(
        "Optimizer scaling",
        f"step cost follows the batch, not the table: sparse step time at 1M rows <= {SPARSE_GROWTH_LIMIT}x "
        "the 100k one",
        "the bundled DeepFM (embedding 8, MLP 400-400-400) and its Adam, sparse path (lazy: only the batch's "
        "rows) vs the same optimizer fed dense embedding gradients (every row, every step); `bench/optimizer.py`",
    )
    rows, growth = [], {}
    for batch in batches:
        steps = max(4, (8_192 if quick else 32_768) // batch)
        contenders, distinct = {}, {}
        for vocabulary in VOCABULARIES:
            data = synthetic(batch * 4, vocabulary, seed=9)
            distinct[vocabulary] = median(
                [len(np.unique(data.ids[i : i + batch])) for i in range(0, len(data.ids), batch)]
            )
            for dense in (False, True):
                contenders[(vocabulary, dense)] = bundled(data, batch, 8, steps, optimizer="adam", dense_updates=dense)
        rates = {key: median(values) for key, values in alternate(contenders, repetitions).items()}
        step_ms = {key: 1000 * batch / rate for key, rate in rates.items()}
        for dense in (False, True):
            small, large = step_ms[(VOCABULARIES[0], dense)], step_ms[(VOCABULARIES[1], dense)]
            growth[(batch, dense)] = large / small
            rows.append(
                [
                    batch,
                    "dense" if dense else "sparse (bundled)",
                    fmt(small, 2),
                    fmt(large, 2),
                    fmt(large / small, 2) + "x",
                    f"{fmt(distinct[VOCABULARIES[0]])} / {fmt(distinct[VOCABULARIES[1]])}",
                    f"<= {SPARSE_GROWTH_LIMIT}x" if not dense else "reference (grows with the table)",
                ]
            )
        sparse_small = step_ms[(VOCABULARIES[0], False)]
        result["data"][f"b{batch}"] = {f"{'dense' if d else 'sparse'}_{v}": ms for (v, d), ms in step_ms.items()}
        result["data"][f"b{batch}"]["sparse_us_per_example"] = 1000 * sparse_small / batch
        del contenders
        gc.collect()
    add_table(
        result,
        [
            "batch",
            "embedding updates",
            "step ms, 100k rows",
            "step ms, 1M rows",
            "1M / 100k",
            "distinct ids per batch (100k / 1M)",
            "goal",
        ],
        rows,
        "Median step time:",
    )
    if len(batches) > 1:
        per_example = [result["data"][f"b{b}"]["sparse_us_per_example"] for b in batches]
        result["notes"].append(
            "Sparse path, 100k rows, microseconds per example: "
            + ", ".join(f"batch {b}: {fmt(us, 2)}" for b, us in zip(batches, per_example))
            + " (a step that follows the batch costs about the same per example at every batch size)."
        )
    for batch in batches:
        sparse, dense = growth[(batch, False)], growth[(batch, True)]
        verdict(
            result,
            f"batch {batch}: sparse step at 1M rows <= {SPARSE_GROWTH_LIMIT}x the 100k step",
            sparse <= SPARSE_GROWTH_LIMIT,
            f"sparse {sparse:.2f}x, dense {dense:.2f}x for 10x the rows",
        )
    result["notes"] += [
        "Dense contender: the same `Trainer` with a gradient transform that turns each embedding gradient "
        "(`IndexedSlices`) into a dense tensor, so `SparseOptimizer` takes its dense Adam path: m, v and the "
        "table are rewritten in full every step, as Keras' stock Adam does to its moments.",
        "What the sparse path still pays for a larger table is not the table's size but where its rows are: "
        "the same Zipf-like fields spread over 10x the ids give more distinct ids per batch (more rows to "
        "deduplicate, gather and update), and a 1M x 8 table with its two Adam slots (~100 MB) no longer fits "
        "in the CPU caches, so each gathered row is more often a memory miss.",
        f"{repetitions} alternating repetitions of all four contenders per batch size.",
    ]
    return result
