"""What each SageMaker TensorFlow training image holds: a plain table, read by the rules and the plan.

Read from the Deep Learning Containers sources (Dockerfiles, core_packages.json, release notes) in 2026-11:
Horovod ships only up to TF 2.12; PipeModeDataset (`sagemaker-tensorflow`) only up to 2.14; 2.15, 2.17 and
2.20 have no training image; 2.21 exists (Amazon Linux 2023, Python 3.12) but SDK v2 does not know it, so
dfm writes its URI itself, in the regions SDK v3's image config lists for it. Every image has Open MPI and
mpi4py. End of support is the DLC "end of patch" date (one year after GA); a test keeps this table consistent
with the installed SDK's image config.
"""

from __future__ import annotations

from dataclasses import dataclass

LAST_HOROVOD_TF = "2.12"
DLC_REPOSITORY = "tensorflow-training"


@dataclass(frozen=True)
class TrainingImage:
    version: str  # the full TensorFlow version in the image
    python: str  # e.g. py310
    horovod: str | None  # Horovod version, None when the image has none
    pipe_mode: str | None  # sagemaker-tensorflow (PipeModeDataset) version, None when absent
    mpi: str  # the MPI the image ships (mpirun is what the toolkit starts for distribution: horovod)
    sdk_v2: bool  # SDK v2's image config knows it; otherwise dfm passes the image URI itself
    end_of_support: str  # ISO date: DLC end of patch
    # For images SDK v2 lacks: the DLC tag per device, as published ({version} filled in), and the DLC registry's
    # account per region where the image is published.
    tags: tuple[tuple[str, str], ...] = ()
    registries: tuple[tuple[str, str], ...] = ()

    @property
    def short(self) -> str:
        return ".".join(self.version.split(".")[:2])


# TF 2.21's regions and accounts: SDK v3's image config, `training.versions["2.21.0"].registries` in
# aws/sagemaker-python-sdk sagemaker-core/src/sagemaker/core/image_uri_config/tensorflow.json (commit a3d9a471,
# read 2026-11-27): the same 38 regions and accounts as its 2.19.0 entry and SDK v2's; no me-west-1.
_DLC = "763104351884"
REGISTRIES_2_21 = {
    "af-south-1": "626614931356",
    "ap-east-1": "871362719292",
    "ap-east-2": "975050140332",
    "ap-northeast-1": _DLC,
    "ap-northeast-2": _DLC,
    "ap-northeast-3": "364406365360",
    "ap-south-1": _DLC,
    "ap-south-2": "772153158452",
    "ap-southeast-1": _DLC,
    "ap-southeast-2": _DLC,
    "ap-southeast-3": "907027046896",
    "ap-southeast-4": "457447274322",
    "ap-southeast-5": "550225433462",
    "ap-southeast-6": "633930458069",
    "ap-southeast-7": "590183813437",
    "ca-central-1": _DLC,
    "ca-west-1": "204538143572",
    "cn-north-1": "727897471807",
    "cn-northwest-1": "727897471807",
    "eu-central-1": _DLC,
    "eu-central-2": "380420809688",
    "eu-north-1": _DLC,
    "eu-south-1": "692866216735",
    "eu-south-2": "503227376785",
    "eu-west-1": _DLC,
    "eu-west-2": _DLC,
    "eu-west-3": _DLC,
    "il-central-1": "780543022126",
    "me-central-1": "914824155844",
    "me-south-1": "217643126080",
    "mx-central-1": "637423239942",
    "sa-east-1": _DLC,
    "us-east-1": _DLC,
    "us-east-2": _DLC,
    "us-gov-east-1": "446045086412",
    "us-gov-west-1": "442386744353",
    "us-west-1": _DLC,
    "us-west-2": _DLC,
}

IMAGES: dict[str, TrainingImage] = {
    image.short: image
    for image in (
        TrainingImage("2.9.2", "py39", "0.24.2", "2.9", "Open MPI 4.1", True, "2023-05-17"),
        TrainingImage("2.10.1", "py39", "0.25.0", "2.10", "Open MPI 4.1", True, "2023-09-06"),
        TrainingImage("2.11.0", "py39", "0.26.1", "2.11", "Open MPI 4.1", True, "2023-11-22"),
        TrainingImage("2.12.0", "py310", "0.27.0", "2.12.0.1.18.1", "Open MPI 4.1.5", True, "2024-03-23"),
        TrainingImage("2.13.0", "py310", None, "2.13", "Open MPI 4.1", True, "2024-07-18"),
        TrainingImage("2.14.1", "py310", None, "2.14.0.1.20.0", "Open MPI 4.1", True, "2024-10-27"),
        TrainingImage("2.16.2", "py310", None, None, "Open MPI 4.1", True, "2025-07-15"),
        TrainingImage("2.18.0", "py310", None, None, "Open MPI 4.1", True, "2026-01-24"),
        TrainingImage("2.19.0", "py312", None, None, "Open MPI 4.1", True, "2026-03-11"),
        TrainingImage(
            "2.21.0",
            "py312",
            None,
            None,
            "Open MPI 4.1.8",
            False,
            "2027-07-10",
            tags=(
                ("cpu", "{version}-cpu-py312-amzn2023-sagemaker"),
                ("gpu", "{version}-gpu-py312-cu129-amzn2023-sagemaker"),
            ),
            registries=tuple(REGISTRIES_2_21.items()),
        ),
    )
}
# TensorFlow releases with no SageMaker training image at all.
NO_IMAGE = ("2.15", "2.17", "2.20")


def short_version(version: str) -> str:
    """`2.14.1` or `2.14` -> `2.14`."""
    return ".".join(version.split(".")[:2])


def find(version: str) -> TrainingImage | None:
    """The image for `2.14` or `2.14.1`; None if no SageMaker TensorFlow training image has that version."""
    image = IMAGES.get(short_version(version))
    if image is None or version not in (image.short, image.version):
        return None
    return image


def newest() -> TrainingImage:
    return max(IMAGES.values(), key=lambda image: version_tuple(image.version))


def version_tuple(version: str) -> tuple[int, ...]:
    """`2.14.1` -> (2, 14, 1); non-numeric parts end the tuple."""
    parts: list[int] = []
    for part in version.split("."):
        if not part.isdigit():
            break
        parts.append(int(part))
    return tuple(parts)


def image_uri(image: TrainingImage, region: str, device: str) -> str | None:
    """The DLC URI of an image SDK v2 lacks, in `region`; None where the DLC registry has no account."""
    account = dict(image.registries).get(region)
    tag = dict(image.tags).get(device)
    if account is None or tag is None:
        return None
    domain = "amazonaws.com.cn" if region.startswith("cn-") else "amazonaws.com"
    return f"{account}.dkr.ecr.{region}.{domain}/{DLC_REPOSITORY}:{tag.format(version=image.version)}"
