"""Which dtype the model computes in (the `mixed_precision` hyperparameter), and why.

The model keeps every variable in float32: embedding tables, first-order weights, MLP kernels and biases,
optimizer slots. Only the MLP casts its input and weights to the compute dtype (deepfm_model.DeepFM._mlp);
the embedding lookups and the FM term stay float32. float16 needs loss scaling (deepfm_training.LossScale),
bfloat16 has float32's exponent range and does not.

- float16 (`true`): GPUs; on a CPU its matmuls run several times slower than float32.
- bfloat16: CPUs with bfloat16 instructions (AVX512-BF16 or AMX-BF16: Intel Sapphire Rapids and later, AMD
  Zen 4 and later) and Ampere-or-newer GPUs.
- auto: float16 where the steps run on GPUs, bfloat16 on a CPU with bfloat16 instructions, float32 elsewhere.

Pure Python (the launcher loads it to check a --local machine's CPU): TensorFlow stays out.
"""

import os

CPUINFO_ENV = "DFM_CPUINFO"  # another file in /proc/cpuinfo's format (tests: a CPU without bfloat16)
BFLOAT16_FLAGS = ("avx512_bf16", "amx_bf16")  # Linux's names for the CPU's bfloat16 instructions


def cpu_bfloat16_flag(environ=None):
    """The first of BFLOAT16_FLAGS this machine's CPU reports (/proc/cpuinfo `flags`), or None."""
    path = (os.environ if environ is None else environ).get(CPUINFO_ENV) or "/proc/cpuinfo"
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            flags = {word for line in f if line.startswith("flags") for word in line.split(":", 1)[-1].split()}
    except OSError:
        return None
    return next((flag for flag in BFLOAT16_FLAGS if flag in flags), None)


def choose(mode, steps_on_gpus, cpu_flag):
    """mode (a parsed mixed_precision) -> (compute dtype name, why)."""
    if mode == "false":
        return "float32", "mixed_precision=false"
    if mode in ("float16", "bfloat16"):
        return mode, f"mixed_precision={mode}"
    if steps_on_gpus:
        return "float16", "mixed_precision=auto and the steps run on GPUs"
    if cpu_flag:
        return "bfloat16", f"mixed_precision=auto and the CPU has bfloat16 instructions ({cpu_flag})"
    return (
        "float32",
        f"mixed_precision=auto, no GPU and the CPU has no bfloat16 instructions ({' or '.join(BFLOAT16_FLAGS)})",
    )
