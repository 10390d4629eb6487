"""The compute dtype's hardware: bfloat16 needs an instance type whose steps run on bfloat16 hardware.

float16 on a CPU is rules.gpu's; the bundled scripts' `auto` picks per machine (entrypoints/deepfm_precision.py) and
needs no rule. `dfm launch --local` checks this machine's own CPU (local.local_request.bfloat16_problem).
"""

from __future__ import annotations

from launcher.facts import catalog
from launcher.rules.findings import Finding, error
from launcher.rules.hparams import script_values
from launcher.spec import Spec

MIXED_PRECISION = "hyperparameters.mixed_precision"


def check_bfloat16_hardware(spec: Spec) -> list[Finding]:
    """Without bfloat16 instructions (or Ampere-or-newer GPUs) every bfloat16 op is emulated, slower than float32."""
    values = script_values(spec)  # None: not the bundled scripts, or a bad value (reported on its own)
    if values is None or values.mixed_precision != "bfloat16" or catalog.has_bfloat16(spec.instance.type) is not False:
        return []
    return [
        error(
            MIXED_PRECISION,
            f"{spec.instance.type} has no bfloat16 hardware, where bfloat16 runs slower than "
            f"float32: use an instance type of {', '.join(catalog.bfloat16_families())}, "
            "or mixed_precision: auto or false",
        )
    ]
