"""A small catalogue of SageMaker training instances (size, price); the TensorFlow images are in `images`.

Prices are approximate on-demand SageMaker *training* list prices in us-east-1 (USD per instance-hour),
rounded from AWS's public pricing page; other regions differ by up to ~30%, and AWS changes them (GPU
prices especially). None where dfm knows no list price. They feed the dry run's cost estimate, never a
bill. Every type here is one botocore's TrainingInstanceType enum has (a test checks it); a type the API
knows but this table lacks gets a warning and no cost or GPU checks.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstanceType:
    vcpus: int
    memory_gib: int
    gpus: int = 0  # CUDA GPUs (what Horovod ranks and SM_NUM_GPUS count)
    gpu: str = ""
    usd_per_hour: float | None = None
    accelerators: str = ""  # other accelerators, which the TensorFlow images do not use

    @property
    def gpu_memory_gib(self) -> int | None:
        """Memory of one GPU (each Horovod rank or MWMS replica holds a whole copy of the model there)."""
        return GPU_MEMORY_GIB.get(self.gpu)


# Memory per GPU (GiB, as NVIDIA states it) of the GPUs below; the p3's V100 is the 16 GB part.
GPU_MEMORY_GIB = {"T4": 16, "A10G": 24, "L4": 24, "L40S": 48, "V100": 16, "A100 40GB": 40, "A100 80GB": 80,
                  "H100": 80, "H200": 141}


def _sizes(family: str, rows: list[tuple]) -> dict[str, InstanceType]:
    """`(size, vcpus, memory_gib, gpus, gpu, usd)` rows of one family -> `ml.<family>.<size>` entries."""
    return {f"ml.{family}.{size}": InstanceType(vcpus, memory, gpus, gpu, usd) for size, vcpus, memory, gpus, gpu, usd in rows}


INSTANCES: dict[str, InstanceType] = {
    # general purpose
    **_sizes("m5", [("large", 2, 8, 0, "", 0.115), ("xlarge", 4, 16, 0, "", 0.23), ("2xlarge", 8, 32, 0, "", 0.461),
                    ("4xlarge", 16, 64, 0, "", 0.922), ("12xlarge", 48, 192, 0, "", 2.765), ("24xlarge", 96, 384, 0, "", 5.53)]),
    **_sizes("m6i", [("large", 2, 8, 0, "", 0.115), ("xlarge", 4, 16, 0, "", 0.23), ("2xlarge", 8, 32, 0, "", 0.461),
                     ("4xlarge", 16, 64, 0, "", 0.922), ("8xlarge", 32, 128, 0, "", 1.843), ("12xlarge", 48, 192, 0, "", 2.765),
                     ("16xlarge", 64, 256, 0, "", 3.686), ("24xlarge", 96, 384, 0, "", 5.53), ("32xlarge", 128, 512, 0, "", 7.373)]),
    **_sizes("m7i", [("large", 2, 8, 0, "", 0.121), ("xlarge", 4, 16, 0, "", 0.242), ("2xlarge", 8, 32, 0, "", 0.484),
                     ("4xlarge", 16, 64, 0, "", 0.968), ("8xlarge", 32, 128, 0, "", 1.935), ("12xlarge", 48, 192, 0, "", 2.903),
                     ("16xlarge", 64, 256, 0, "", 3.871), ("24xlarge", 96, 384, 0, "", 5.806), ("48xlarge", 192, 768, 0, "", 11.612)]),
    # compute optimized
    **_sizes("c5", [("xlarge", 4, 8, 0, "", 0.204), ("2xlarge", 8, 16, 0, "", 0.408), ("4xlarge", 16, 32, 0, "", 0.816),
                    ("9xlarge", 36, 72, 0, "", 1.836), ("18xlarge", 72, 144, 0, "", 3.672)]),
    **_sizes("c6i", [("xlarge", 4, 8, 0, "", 0.204), ("2xlarge", 8, 16, 0, "", 0.408), ("4xlarge", 16, 32, 0, "", 0.816),
                     ("8xlarge", 32, 64, 0, "", 1.632), ("12xlarge", 48, 96, 0, "", 2.448), ("16xlarge", 64, 128, 0, "", 3.264),
                     ("24xlarge", 96, 192, 0, "", 4.896), ("32xlarge", 128, 256, 0, "", 6.528)]),
    **_sizes("c7i", [("large", 2, 4, 0, "", 0.107), ("xlarge", 4, 8, 0, "", 0.214), ("2xlarge", 8, 16, 0, "", 0.428),
                     ("4xlarge", 16, 32, 0, "", 0.857), ("8xlarge", 32, 64, 0, "", 1.714), ("12xlarge", 48, 96, 0, "", 2.57),
                     ("16xlarge", 64, 128, 0, "", 3.427), ("24xlarge", 96, 192, 0, "", 5.141), ("48xlarge", 192, 384, 0, "", 10.282)]),
    # memory optimized: large embedding tables on parameter servers
    **_sizes("r7i", [("large", 2, 16, 0, "", None), ("xlarge", 4, 32, 0, "", None), ("2xlarge", 8, 64, 0, "", None),
                     ("4xlarge", 16, 128, 0, "", None), ("8xlarge", 32, 256, 0, "", None), ("12xlarge", 48, 384, 0, "", None),
                     ("16xlarge", 64, 512, 0, "", None), ("24xlarge", 96, 768, 0, "", None), ("48xlarge", 192, 1536, 0, "", None)]),
    **_sizes("r5", [("large", 2, 16, 0, "", 0.151), ("xlarge", 4, 32, 0, "", 0.302), ("2xlarge", 8, 64, 0, "", 0.605),
                    ("4xlarge", 16, 128, 0, "", 1.21), ("8xlarge", 32, 256, 0, "", 2.419), ("12xlarge", 48, 384, 0, "", 3.629),
                    ("16xlarge", 64, 512, 0, "", 4.838), ("24xlarge", 96, 768, 0, "", 7.258)]),
    **_sizes("r6i", [("large", 2, 16, 0, "", 0.151), ("xlarge", 4, 32, 0, "", 0.302), ("2xlarge", 8, 64, 0, "", 0.605),
                     ("4xlarge", 16, 128, 0, "", 1.21), ("8xlarge", 32, 256, 0, "", 2.419), ("12xlarge", 48, 384, 0, "", 3.629),
                     ("16xlarge", 64, 512, 0, "", 4.838), ("24xlarge", 96, 768, 0, "", 7.258), ("32xlarge", 128, 1024, 0, "", 9.677)]),
    # GPU
    **_sizes("g4dn", [("xlarge", 4, 16, 1, "T4", 0.736), ("2xlarge", 8, 32, 1, "T4", 0.94), ("4xlarge", 16, 64, 1, "T4", 1.505),
                      ("8xlarge", 32, 128, 1, "T4", 2.72), ("12xlarge", 48, 192, 4, "T4", 4.89), ("16xlarge", 64, 256, 1, "T4", 5.44)]),
    **_sizes("g5", [("xlarge", 4, 16, 1, "A10G", 1.408), ("2xlarge", 8, 32, 1, "A10G", 1.515), ("4xlarge", 16, 64, 1, "A10G", 2.03),
                    ("8xlarge", 32, 128, 1, "A10G", 3.06), ("16xlarge", 64, 256, 1, "A10G", 5.12), ("12xlarge", 48, 192, 4, "A10G", 7.09),
                    ("24xlarge", 96, 384, 4, "A10G", 10.18), ("48xlarge", 192, 768, 8, "A10G", 20.36)]),
    **_sizes("g6", [("xlarge", 4, 16, 1, "L4", 1.006), ("2xlarge", 8, 32, 1, "L4", 1.222), ("4xlarge", 16, 64, 1, "L4", 1.655),
                    ("8xlarge", 32, 128, 1, "L4", 2.52), ("16xlarge", 64, 256, 1, "L4", 4.25), ("12xlarge", 48, 192, 4, "L4", 5.752),
                    ("24xlarge", 96, 384, 4, "L4", 8.344), ("48xlarge", 192, 768, 8, "L4", 16.688)]),
    **_sizes("g6e", [("xlarge", 4, 32, 1, "L40S", 2.326), ("2xlarge", 8, 64, 1, "L40S", 2.803), ("4xlarge", 16, 128, 1, "L40S", 3.755),
                     ("8xlarge", 32, 256, 1, "L40S", 5.661), ("16xlarge", 64, 512, 1, "L40S", 9.471), ("12xlarge", 48, 384, 4, "L40S", 13.116),
                     ("24xlarge", 96, 768, 4, "L40S", 18.832), ("48xlarge", 192, 1536, 8, "L40S", 37.664)]),
    **_sizes("p3", [("2xlarge", 8, 61, 1, "V100", 3.825), ("8xlarge", 32, 244, 4, "V100", 14.688), ("16xlarge", 64, 488, 8, "V100", 28.152)]),
    "ml.p4d.24xlarge": InstanceType(96, 1152, 8, "A100 40GB", 37.688),
    "ml.p4de.24xlarge": InstanceType(96, 1152, 8, "A100 80GB", 47.11),
    "ml.p5.48xlarge": InstanceType(192, 2048, 8, "H100", 113.07),
    "ml.p5e.48xlarge": InstanceType(192, 2048, 8, "H200"),
    "ml.p5en.48xlarge": InstanceType(192, 2048, 8, "H200"),
    # AWS Trainium: Neuron devices, not CUDA GPUs
    "ml.trn1.2xlarge": InstanceType(8, 32, usd_per_hour=1.545, accelerators="1 Trainium (Neuron SDK)"),
    "ml.trn1.32xlarge": InstanceType(128, 512, usd_per_hour=24.725, accelerators="16 Trainium (Neuron SDK)"),
}


def instance(name: str) -> InstanceType | None:
    return INSTANCES.get(name)


# bfloat16 in hardware where the steps run. CPUs: the 7i families' 4th-generation Xeon Scalable (Sapphire Rapids)
# has AVX512-BF16 and AMX-BF16 (AWS's C7i/M7i/R7i pages: "Intel Advanced Matrix Extensions"; Linux reports
# avx512_bf16 and amx_bf16); Skylake/Cascade Lake (c5, m5, r5) and Ice Lake (c6i, m6i, r6i) have neither.
# GPUs: NVIDIA Ampere and newer (compute capability >= 8.0) have bfloat16 tensor cores; Turing's T4 and
# Volta's V100 do not. trn1's Trainium is not used by the TensorFlow images, and its host CPU is Ice Lake.
BFLOAT16_CPU_FAMILIES = ("c7i", "m7i", "r7i")
BFLOAT16_GPUS = ("A10G", "L4", "L40S", "A100 40GB", "A100 80GB", "H100", "H200")


def has_bfloat16(name: str) -> bool | None:
    """Whether the steps of a job on this instance type run on bfloat16 hardware; None: a type dfm does not know."""
    info = instance(name)
    if info is None:
        return None
    if info.gpus:
        return info.gpu in BFLOAT16_GPUS
    return name.split(".")[1] in BFLOAT16_CPU_FAMILIES


def bfloat16_families() -> list[str]:
    """`ml.<family>` of every catalogued family with bfloat16 hardware."""
    return sorted({"ml." + name.split(".")[1] for name in INSTANCES if has_bfloat16(name)})
