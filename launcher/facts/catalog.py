"""The catalogue of SageMaker training instances: every type of botocore's TrainingInstanceType enum (a test checks
it), with its size, its GPUs or other accelerators, whether its steps run on bfloat16 hardware, and a price; the
TensorFlow images are in `images`.

Each family names where its facts are published (`Family.source`): vCPUs and memory from AWS's EC2 instance type
pages (SageMaker's ml.* types are the EC2 types of the same name), the processor and so bfloat16 from the same
pages, GPU memory from NVIDIA's data sheets as AWS quotes them. Prices are approximate on-demand SageMaker
*training* list prices in us-east-1 (USD per instance-hour), rounded from AWS's public pricing page
(https://aws.amazon.com/sagemaker/pricing/); other regions differ by up to ~30%, and AWS changes them (GPU prices
especially). None where dfm knows no list price. They feed the dry run's cost estimate, never a bill. A type the
API knows but this table lacks (UNCATALOGUED) gets a warning and no cost or GPU checks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    vcpus: int
    memory_gib: float
    gpus: int = 0  # CUDA GPUs (what Horovod ranks and SM_NUM_GPUS count)
    gpu: str = ""
    usd_per_hour: float | None = None
    accelerators: str = ""  # other accelerators, which the TensorFlow images do not use

    @property
    def gpu_memory_gib(self) -> int | None:
        """Memory of one GPU (each Horovod rank or MWMS replica holds a whole copy of the model there)."""
        return GPU_MEMORY_GIB.get(self.gpu)


# Memory per GPU (GiB, as NVIDIA states it and AWS quotes it) of the GPUs below; the p3's V100 is the 16 GB part,
# the p3dn's the 32 GB one; a K80 board holds two GPUs of 12 GB, which AWS counts as two.
GPU_MEMORY_GIB = {
    "K80": 12,
    "T4": 16,
    "A10G": 24,
    "L4": 24,
    "L40S": 48,
    "V100": 16,
    "V100 32GB": 32,
    "A100 40GB": 40,
    "A100 80GB": 80,
    "H100": 80,
    "H200": 141,
    "B200": 180,
    "B300": 288,
}


@dataclass(frozen=True)
class Family:
    """What every size of a family shares: its processor (and so bfloat16), its GPU kind, where that is published."""

    processor: str  # the host CPU, or the GPU/accelerator the steps run on
    bfloat16: bool | None  # the steps run on bfloat16 hardware; None: the TensorFlow images cannot use the type
    source: str
    gpu: str = ""
    accelerators: str = ""


EC2 = "https://aws.amazon.com/ec2/instance-types/"
# bfloat16 on CPUs: 4th-generation Xeon Scalable (Sapphire Rapids, the 7i families) and Xeon 6 (Granite Rapids, the
# 8i families) have AVX512-BF16 and AMX-BF16 (AWS's pages: "Intel Advanced Matrix Extensions"; Linux reports
# avx512_bf16 and amx_bf16); Haswell/Broadwell (c4, m4), Skylake/Cascade Lake (c5, c5n, m5, r5, r5d, t3) and
# Ice Lake (c6i, m6i, r6i) have neither. GPUs: NVIDIA Ampere and newer (compute capability >= 8.0) have bfloat16
# tensor cores; Kepler's K80, Volta's V100 and Turing's T4 do not.
_NO_BF16_XEON = "Intel Xeon Scalable (Skylake / Cascade Lake): no bfloat16 instructions"
_SPR = "4th-generation Intel Xeon Scalable (Sapphire Rapids): AMX-BF16, AVX512-BF16"
_GNR = "Intel Xeon 6 (Granite Rapids): AMX-BF16, AVX512-BF16"
_ICL = "3rd-generation Intel Xeon Scalable (Ice Lake): no bfloat16 instructions"
FAMILIES: dict[str, Family] = {
    "m4": Family(
        "Intel Xeon E5 v3/v4 (Haswell / Broadwell): no bfloat16 instructions",
        False,
        EC2 + "#General_Purpose (previous generation)",
    ),
    "c4": Family(
        "Intel Xeon E5-2666 v3 (Haswell): no bfloat16 instructions",
        False,
        EC2 + "#Compute_Optimized (previous generation)",
    ),
    "t3": Family(_NO_BF16_XEON, False, EC2 + "t3/"),
    "m5": Family(_NO_BF16_XEON, False, EC2 + "m5/"),
    "c5": Family(_NO_BF16_XEON, False, EC2 + "c5/"),
    "c5n": Family(_NO_BF16_XEON, False, EC2 + "c5/ (C5n)"),
    "r5": Family(_NO_BF16_XEON, False, EC2 + "r5/"),
    "r5d": Family(_NO_BF16_XEON, False, EC2 + "r5/ (R5d)"),
    "m6i": Family(_ICL, False, EC2 + "m6i/"),
    "c6i": Family(_ICL, False, EC2 + "c6i/"),
    "r6i": Family(_ICL, False, EC2 + "r6i/"),
    "m7i": Family(_SPR, True, EC2 + "m7i/"),
    "m7i-flex": Family(_SPR, True, EC2 + "m7i/ (M7i-flex)"),
    "c7i": Family(_SPR, True, EC2 + "c7i/"),
    "c7i-flex": Family(_SPR, True, EC2 + "c7i/ (C7i-flex)"),
    "r7i": Family(_SPR, True, EC2 + "r7i/"),
    "m8i": Family(_GNR, True, EC2 + "m8i/"),
    "m8i-flex": Family(_GNR, True, EC2 + "m8i/ (M8i-flex)"),
    "c8i": Family(_GNR, True, EC2 + "c8i/"),
    "c8i-flex": Family(_GNR, True, EC2 + "c8i/ (C8i-flex)"),
    "r8i": Family(_GNR, True, EC2 + "r8i/"),
    "r8i-flex": Family(_GNR, True, EC2 + "r8i/ (R8i-flex)"),
    "p2": Family("NVIDIA K80 (Kepler): no bfloat16", False, EC2 + "p2/", gpu="K80"),
    "p3": Family("NVIDIA V100 (Volta): no bfloat16", False, EC2 + "p3/", gpu="V100"),
    "p3dn": Family("NVIDIA V100 32 GB (Volta): no bfloat16", False, EC2 + "p3/ (p3dn.24xlarge)", gpu="V100 32GB"),
    "g4dn": Family("NVIDIA T4 (Turing): no bfloat16", False, EC2 + "g4/", gpu="T4"),
    "g5": Family("NVIDIA A10G (Ampere): bfloat16 tensor cores", True, EC2 + "g5/", gpu="A10G"),
    "g6": Family("NVIDIA L4 (Ada Lovelace): bfloat16 tensor cores", True, EC2 + "g6/", gpu="L4"),
    "g6e": Family("NVIDIA L40S (Ada Lovelace): bfloat16 tensor cores", True, EC2 + "g6e/", gpu="L40S"),
    "p4d": Family("NVIDIA A100 40 GB (Ampere): bfloat16 tensor cores", True, EC2 + "p4/", gpu="A100 40GB"),
    "p4de": Family("NVIDIA A100 80 GB (Ampere): bfloat16 tensor cores", True, EC2 + "p4/ (p4de)", gpu="A100 80GB"),
    "p5": Family("NVIDIA H100 (Hopper): bfloat16 tensor cores", True, EC2 + "p5/", gpu="H100"),
    "p5e": Family("NVIDIA H200 (Hopper): bfloat16 tensor cores", True, EC2 + "p5/ (P5e)", gpu="H200"),
    "p5en": Family("NVIDIA H200 (Hopper): bfloat16 tensor cores", True, EC2 + "p5/ (P5en)", gpu="H200"),
    "p6-b200": Family("NVIDIA B200 (Blackwell): bfloat16 tensor cores", True, EC2 + "p6/", gpu="B200"),
    "p6-b300": Family("NVIDIA B300 (Blackwell Ultra): bfloat16 tensor cores", True, EC2 + "p6/ (P6-B300)", gpu="B300"),
    # An Arm (NVIDIA Grace) host: SageMaker's TensorFlow images are x86-64 only, so no step runs there.
    "p6e-gb200": Family(
        "NVIDIA GB200 (Grace Arm CPUs, Blackwell GPUs)",
        None,
        EC2 + "p6/ (P6e-GB200)",
        accelerators="4 Blackwell GPUs on an Arm (Grace) host, which the x86-64 TensorFlow images do not run on",
    ),
    # AWS Trainium: Neuron devices, not CUDA GPUs; trn1's host CPU is Ice Lake.
    "trn1": Family("AWS Trainium (Neuron SDK), Intel Ice Lake host", False, EC2 + "trn1/"),
    "trn1n": Family("AWS Trainium (Neuron SDK), Intel Ice Lake host", False, EC2 + "trn1/ (trn1n)"),
    "trn2": Family("AWS Trainium2 (Neuron SDK)", None, EC2 + "trn2/"),
}
# Types of the API's enum whose published facts dfm has not checked: the rules are silent on them (a warning).
UNCATALOGUED: dict[str, str] = {
    "g7": "its GPU and sizes are not in dfm's sources yet",
    "g7e": "its GPU and sizes are not in dfm's sources yet",
}

# vCPUs of each size: AWS's naming (an xlarge has 4, an Nxlarge N times that).
SIZE_VCPUS = {
    "medium": 2,
    "large": 2,
    "xlarge": 4,
    **{f"{n}xlarge": 4 * n for n in (2, 4, 8, 9, 10, 12, 16, 18, 24, 32, 48, 96)},
}


def _sizes(family: str, rows: list[tuple]) -> dict[str, InstanceType]:
    """`(size, vcpus, memory_gib, gpus, usd)` rows of one family -> `ml.<family>.<size>` entries."""
    kind = FAMILIES[family]
    return {
        f"ml.{family}.{size}": InstanceType(
            vcpus, memory, gpus, kind.gpu if gpus else "", usd, accelerators=kind.accelerators
        )
        for size, vcpus, memory, gpus, usd in rows
    }


def _cpu_sizes(
    family: str, gib_per_vcpu: float, sizes: str, usd: dict[str, float] | None = None
) -> dict[str, InstanceType]:
    """A CPU family whose sizes keep AWS's ratios: SIZE_VCPUS vCPUs and `gib_per_vcpu` GiB each."""
    return _sizes(
        family,
        [(size, SIZE_VCPUS[size], SIZE_VCPUS[size] * gib_per_vcpu, 0, (usd or {}).get(size)) for size in sizes.split()],
    )


def _priced(sizes: str, prices: str) -> dict[str, float]:
    return dict(zip(sizes.split(), map(float, prices.split())))


_M5 = "large xlarge 2xlarge 4xlarge 12xlarge 24xlarge"
_M6I = "large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge"
_7I = "large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 48xlarge"
_8I = "large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge 48xlarge 96xlarge"
_FLEX = "large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge"
_R5 = "large xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge"
_C5 = "xlarge 2xlarge 4xlarge 9xlarge 18xlarge"
_C6I = "xlarge 2xlarge 4xlarge 8xlarge 12xlarge 16xlarge 24xlarge 32xlarge"
_R_PRICES = "0.151 0.302 0.605 1.21 2.419 3.629 4.838 7.258"

INSTANCES: dict[str, InstanceType] = {
    # general purpose (4 GiB per vCPU)
    **_sizes(
        "m4",
        [
            ("xlarge", 4, 16, 0, None),
            ("2xlarge", 8, 32, 0, None),
            ("4xlarge", 16, 64, 0, None),
            ("10xlarge", 40, 160, 0, None),
            ("16xlarge", 64, 256, 0, None),
        ],
    ),
    **_cpu_sizes("m5", 4, _M5, _priced(_M5, "0.115 0.23 0.461 0.922 2.765 5.53")),
    **_cpu_sizes("m6i", 4, _M6I, _priced(_M6I, "0.115 0.23 0.461 0.922 1.843 2.765 3.686 5.53 7.373")),
    **_cpu_sizes("m7i", 4, _7I, _priced(_7I, "0.121 0.242 0.484 0.968 1.935 2.903 3.871 5.806 11.612")),
    **_cpu_sizes("m7i-flex", 4, _FLEX),
    **_cpu_sizes("m8i", 4, _8I),
    **_cpu_sizes("m8i-flex", 4, _FLEX),
    **_sizes(
        "t3",
        [("medium", 2, 4, 0, None), ("large", 2, 8, 0, None), ("xlarge", 4, 16, 0, None), ("2xlarge", 8, 32, 0, None)],
    ),
    # compute optimized (2 GiB per vCPU; c4 and c5n their own)
    **_sizes(
        "c4",
        [
            ("xlarge", 4, 7.5, 0, None),
            ("2xlarge", 8, 15, 0, None),
            ("4xlarge", 16, 30, 0, None),
            ("8xlarge", 36, 60, 0, None),
        ],
    ),
    **_cpu_sizes("c5", 2, _C5, _priced(_C5, "0.204 0.408 0.816 1.836 3.672")),
    **_sizes(
        "c5n",
        [
            ("xlarge", 4, 10.5, 0, None),
            ("2xlarge", 8, 21, 0, None),
            ("4xlarge", 16, 42, 0, None),
            ("9xlarge", 36, 96, 0, None),
            ("18xlarge", 72, 192, 0, None),
        ],
    ),
    **_cpu_sizes("c6i", 2, _C6I, _priced(_C6I, "0.204 0.408 0.816 1.632 2.448 3.264 4.896 6.528")),
    **_cpu_sizes("c7i", 2, _7I, _priced(_7I, "0.107 0.214 0.428 0.857 1.714 2.57 3.427 5.141 10.282")),
    **_cpu_sizes("c7i-flex", 2, _FLEX.replace("large ", "", 1)),
    **_cpu_sizes("c8i", 2, _8I.replace("large ", "", 1)),
    **_cpu_sizes("c8i-flex", 2, _FLEX.replace("large ", "", 1)),
    # memory optimized (8 GiB per vCPU): large embedding tables on parameter servers
    **_cpu_sizes("r5", 8, _R5, _priced(_R5, _R_PRICES)),
    **_cpu_sizes("r5d", 8, _R5),
    **_cpu_sizes("r6i", 8, _M6I, _priced(_M6I, _R_PRICES + " 9.677")),
    **_cpu_sizes("r7i", 8, _7I),
    **_cpu_sizes("r8i", 8, _8I),
    **_cpu_sizes("r8i-flex", 8, _FLEX),
    # GPU
    **_sizes("p2", [("xlarge", 4, 61, 1, None), ("8xlarge", 32, 488, 8, None), ("16xlarge", 64, 732, 16, None)]),
    **_sizes(
        "g4dn",
        [
            ("xlarge", 4, 16, 1, 0.736),
            ("2xlarge", 8, 32, 1, 0.94),
            ("4xlarge", 16, 64, 1, 1.505),
            ("8xlarge", 32, 128, 1, 2.72),
            ("12xlarge", 48, 192, 4, 4.89),
            ("16xlarge", 64, 256, 1, 5.44),
        ],
    ),
    **_sizes(
        "g5",
        [
            ("xlarge", 4, 16, 1, 1.408),
            ("2xlarge", 8, 32, 1, 1.515),
            ("4xlarge", 16, 64, 1, 2.03),
            ("8xlarge", 32, 128, 1, 3.06),
            ("16xlarge", 64, 256, 1, 5.12),
            ("12xlarge", 48, 192, 4, 7.09),
            ("24xlarge", 96, 384, 4, 10.18),
            ("48xlarge", 192, 768, 8, 20.36),
        ],
    ),
    **_sizes(
        "g6",
        [
            ("xlarge", 4, 16, 1, 1.006),
            ("2xlarge", 8, 32, 1, 1.222),
            ("4xlarge", 16, 64, 1, 1.655),
            ("8xlarge", 32, 128, 1, 2.52),
            ("16xlarge", 64, 256, 1, 4.25),
            ("12xlarge", 48, 192, 4, 5.752),
            ("24xlarge", 96, 384, 4, 8.344),
            ("48xlarge", 192, 768, 8, 16.688),
        ],
    ),
    **_sizes(
        "g6e",
        [
            ("xlarge", 4, 32, 1, 2.326),
            ("2xlarge", 8, 64, 1, 2.803),
            ("4xlarge", 16, 128, 1, 3.755),
            ("8xlarge", 32, 256, 1, 5.661),
            ("16xlarge", 64, 512, 1, 9.471),
            ("12xlarge", 48, 384, 4, 13.116),
            ("24xlarge", 96, 768, 4, 18.832),
            ("48xlarge", 192, 1536, 8, 37.664),
        ],
    ),
    **_sizes("p3", [("2xlarge", 8, 61, 1, 3.825), ("8xlarge", 32, 244, 4, 14.688), ("16xlarge", 64, 488, 8, 28.152)]),
    **_sizes("p3dn", [("24xlarge", 96, 768, 8, None)]),
    **_sizes("p4d", [("24xlarge", 96, 1152, 8, 37.688)]),
    **_sizes("p4de", [("24xlarge", 96, 1152, 8, 47.11)]),
    **_sizes("p5", [("4xlarge", 16, 256, 1, None), ("48xlarge", 192, 2048, 8, 113.07)]),
    **_sizes("p5e", [("48xlarge", 192, 2048, 8, None)]),
    **_sizes("p5en", [("48xlarge", 192, 2048, 8, None)]),
    **_sizes("p6-b200", [("48xlarge", 192, 2048, 8, None)]),
    **_sizes("p6-b300", [("48xlarge", 192, 4096, 8, None)]),
    **_sizes("p6e-gb200", [("36xlarge", 144, 960, 0, None)]),
    **_sizes("trn1", [("2xlarge", 8, 32, 0, 1.545), ("32xlarge", 128, 512, 0, 24.725)]),
    **_sizes("trn1n", [("32xlarge", 128, 512, 0, None)]),
    **_sizes("trn2", [("48xlarge", 192, 2048, 0, None)]),
}
_ACCELERATORS = {
    "ml.trn1.2xlarge": "1 Trainium (Neuron SDK)",
    "ml.trn1.32xlarge": "16 Trainium (Neuron SDK)",
    "ml.trn1n.32xlarge": "16 Trainium (Neuron SDK)",
    "ml.trn2.48xlarge": "16 Trainium2 (Neuron SDK)",
}
INSTANCES.update(
    {
        name: InstanceType(
            INSTANCES[name].vcpus,
            INSTANCES[name].memory_gib,
            usd_per_hour=INSTANCES[name].usd_per_hour,
            accelerators=text,
        )
        for name, text in _ACCELERATORS.items()
    }
)


def family(name: str) -> Family | None:
    """The family of `ml.<family>.<size>`, if dfm knows it."""
    parts = name.split(".")
    return FAMILIES.get(parts[1]) if len(parts) == 3 else None


def instance(name: str) -> InstanceType | None:
    return INSTANCES.get(name)


def has_bfloat16(name: str) -> bool | None:
    """Whether the steps of a job on this instance type run on bfloat16 hardware; None: a type dfm does not know
    (or one the TensorFlow images cannot use)."""
    kind = family(name)
    return kind.bfloat16 if kind is not None and name in INSTANCES else None


def bfloat16_families() -> list[str]:
    """`ml.<family>` of every catalogued family with bfloat16 hardware."""
    return sorted({"ml." + name.split(".")[1] for name in INSTANCES if has_bfloat16(name)})
