"""Item 1: training examples/s of the bundled DeepFM vs DeepCTR's, against a measured 2-core ceiling."""

from __future__ import annotations

import gc

from bench import ceiling as ceiling_model
from bench.common import add_table, alternate, fmt, median, section, verdict, versions
from bench.contenders import bundled, deepctr, synthetic

LAYERS = [400, 400, 400]
FEATURE_SIZE = 117581
CEILING_GOAL = 0.80
DEEPCTR_GOAL = 1.5


CONFIGS = [(k, b) for k in (8, 16) for b in (512, 4096)]  # (embedding size, batch), quick or not


def measure(quick: bool, context: dict) -> dict:
    repetitions = context.get("repetitions") or (3 if quick else 7)
    examples_per_window = 16_384 if quick else 65_536
    result = section(
        "Training throughput",
        f"bundled DeepFM >= {CEILING_GOAL:.0%} of the estimated 2-core ceiling and >= {DEEPCTR_GOAL}x DeepCTR",
        "one training step after another on in-memory synthetic data (39 fields, MLP 400-400-400, Adagrad "
        f"lr 0.01, regularized: dropout 0.2, L2 on looked-up embedding rows and MLP kernels), "
        f"{examples_per_window:,} examples per timed window; `bench/training.py`")
    data = synthetic(4096 * (4 if quick else 8), FEATURE_SIZE)
    rows, detail_rows, per_config = [], [], {}
    deepctr_error = None
    for k, batch in CONFIGS:
        steps = max(4, examples_per_window // batch)
        contenders = {"bundled": bundled(data, batch, k, steps)}
        try:
            contenders["deepctr"] = deepctr(data, batch, k, steps)
        except Exception as err:  # reported, never replaced by a number
            deepctr_error = f"{type(err).__name__}: {err}"[:200]
        contenders.update(ceiling_model.kernels(batch, k, LAYERS, FEATURE_SIZE, calls=steps))
        times = {name: median(values) for name, values in alternate(contenders, repetitions).items()}
        model = ceiling_model.ceiling(times["gemm"], times["embedding"], batch, k, LAYERS)
        ours, top = times["bundled"], model["ceiling_examples_per_s"]
        theirs = times.get("deepctr", float("nan"))
        per_config[f"k{k}/b{batch}"] = {"bundled": ours, "deepctr": theirs, "ceiling": top}
        rows.append([k, batch, fmt(ours), fmt(theirs), fmt(top), fmt(ours / top, 2), fmt(ours / theirs, 2),
                     fmt(top / theirs, 2)])
        step_ms = 1000 * batch / ours
        kernel_ms = 1000 * (model["gemm_s_per_batch"] + model["embedding_s_per_batch"])
        detail_rows.append([k, batch, fmt(model["mlp_flops_per_example"] / 1e6, 2), fmt(model["gemm_gflops"], 1),
                            fmt(1000 * model["gemm_s_per_batch"], 2), fmt(model["embedding_gbytes_per_s"], 2),
                            fmt(1000 * model["embedding_s_per_batch"], 2), fmt(step_ms, 2),
                            f"{fmt(step_ms - kernel_ms, 2)} ({fmt(100 * (1 - kernel_ms / step_ms))}%)"])
        del contenders
        gc.collect()

    add_table(result, ["embedding", "batch", "bundled ex/s", "DeepCTR ex/s", "ceiling ex/s",
                       f"bundled / ceiling (goal >= {CEILING_GOAL})", f"bundled / DeepCTR (goal >= {DEEPCTR_GOAL})",
                       "ceiling / DeepCTR (most any step could gain)"],
              rows, "Medians of examples/s:")
    add_table(result, ["embedding", "batch", "MLP MFLOP/example (fwd+bwd)", "GEMM GFLOP/s", "GEMM ms/batch",
                       "embedding GB/s", "embedding ms/batch", "bundled step ms", "rest of step ms (share)"],
              detail_rows, "The ceiling model, measured in the same run, and where the bundled step's time goes:")

    ceiling_ratios = {name: c["bundled"] / c["ceiling"] for name, c in per_config.items()}
    versus = {name: c["bundled"] / c["deepctr"] for name, c in per_config.items()}
    worst = min(ceiling_ratios, key=ceiling_ratios.get)
    verdict(result, f"bundled >= {CEILING_GOAL:.0%} of the ceiling", min(ceiling_ratios.values()) >= CEILING_GOAL,
            ", ".join(f"{n} {r:.2f}" for n, r in ceiling_ratios.items())
            + ("" if ceiling_ratios[worst] >= CEILING_GOAL
               else f"; worst {worst} short by {CEILING_GOAL - ceiling_ratios[worst]:.2f} of the ceiling"))
    if deepctr_error:
        verdict(result, f"bundled >= {DEEPCTR_GOAL}x DeepCTR", None, f"DeepCTR not run: {deepctr_error}")
    else:
        low = min(versus, key=versus.get)
        verdict(result, f"bundled >= {DEEPCTR_GOAL}x DeepCTR", versus[low] >= DEEPCTR_GOAL,
                ", ".join(f"{n} {r:.2f}x" for n, r in versus.items())
                + ("" if versus[low] >= DEEPCTR_GOAL else f"; {low} short by {DEEPCTR_GOAL - versus[low]:.2f}x"))

    result["notes"] += [
        "Ceiling model: seconds per example = MLP GEMM time + embedding time, each measured here on the model's "
        "exact shapes. GEMM: the MLP's matmuls chained as backpropagation runs them, forward X@W per layer, "
        "then from the top X^T@dY and dY@W^T (backward ~ 2x forward, so 3x the forward FLOPs: "
        "2*(39k*400 + 400*400 + 400*400 + 400) per example forward). Embedding: gather of 39 rows of "
        "the k-wide table and of the 1-wide first-order table, then a fused sparse Adagrad update "
        "(`ResourceSparseApplyAdagradV2`) of the same rows; bytes counted as 5 passes over 39*(k+1) floats. "
        "Left out: activations, bias and ReLU, the FM term, loss, metrics, deduplication of ids, and per-op "
        "dispatch: the `rest of step` column is what those cost in the bundled step.",
        "Bundled: `entrypoints/deepfm_training.py` `build_trainer` + `Trainer.train_step` in one `tf.function` "
        "that also pulls the batch, with its streaming loss/AUC metrics (DeepCTR is compiled without metrics).",
        f"DeepCTR {versions(('deepctr',))['deepctr']} (`deepctr.models.DeepFM`; 0.9.3 is the last release "
        "that runs on TF 2.14's bundled Keras) with "
        "39 `SparseFeat` fields whose vocabularies are the fields' id ranges (same total rows), values ignored "
        "(it has no per-field value scaling), l2_reg_embedding 1e-5, dnn_dropout 0.2, l2_reg_dnn 0.03 (the bundled "
        "step's l2_reg, dropout and l2_dense: both steps regularized alike), Adagrad 0.01, stepped through "
        "`model.make_train_function()` exactly as `fit` steps it.",
        "`ceiling / DeepCTR` bounds the DeepCTR goal: where DeepCTR already runs within 1.5x of the ceiling "
        "(large batches, where the shared GEMMs dominate both steps), no implementation of the same model "
        "can be 1.5x faster than it on this machine.",
        "Finding of a one-off tf.profiler trace (k16/b512, 2 threads; not part of `make bench`, not "
        "regenerated): at batch 512 the MLP matmuls take most of the op time but scale poorly to the second "
        "core; the `rest of step` is small elementwise ops (bias, ReLU, FM term, loss), the gather + id dedup "
        "+ sparse update, and Python call overhead per compiled step. Tried and slower: XLA (`jit_compile`; "
        "its CPU matmul was slower than oneDNN's, and `tf.unique` does not compile), one concatenated "
        "[feature_size, 1+k] table, a hand-written FM gradient. Not tried yet: several steps per compiled "
        "call.",
        "Finding of timed variants of the step (one process, alternating, k8/b4096): tf.nn.dropout's random "
        "generation (one 32-bit Philox word per element, 3 x batch x 400 a step) was about 7 of the 43 ms; the "
        "bundled model's dropout (`deepfm_model.dropout`) keeps its law exactly from one random byte per element "
        "(5-12% more examples/s at every configuration; on GPU hosts the model keeps tf.nn.dropout). Each 4% of the step or less, so left as they are: the "
        "streaming metrics, the L2 terms, the id dedup of the two tables; reading each table row once per "
        "distinct id (one tf.unique for both tables) and folding dropout's scale into its gradient were no faster.",
        f"{repetitions} alternating repetitions of all four contenders (bundled, DeepCTR, GEMM kernel, embedding "
        "kernel) per configuration; the ceiling therefore sees the same machine load as the models.",
    ]
    above = [name for name, ratio in ceiling_ratios.items() if ratio > 1.0]
    if above:
        result["notes"].append(
            f"Bundled above its own ceiling ({', '.join(above)}): impossible on a quiet machine, since its step "
            "contains those kernels; here the kernels' repetitions met bursts of other load. Treat that "
            "configuration's ceiling ratio as noise and rerun (`make bench`, more repetitions) on a quieter machine.")
    if deepctr_error:
        result["notes"].append(f"DeepCTR not run: {deepctr_error}")
    result["data"] = {"per_config": per_config,
                      "best_bundled_examples_per_s": max(c["bundled"] for c in per_config.values())}
    return result
