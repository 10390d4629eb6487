"""Rules about the training image: does a SageMaker TensorFlow image exist for the spec, and does it hold
what the job needs (Horovod, PipeModeDataset, a TensorFlow new enough for the distribution)."""

from __future__ import annotations

import datetime

from launcher.facts import contract
from launcher.facts import images
from launcher.rules.findings import Finding, error, warning
from launcher.spec import Spec

MIRRORED_MIN_TF = (2, 9)  # the SDK's multi_worker_mirrored_strategy distribution needs TF >= 2.9


def _tf_version(spec: Spec) -> tuple[int, ...] | None:
    if spec.framework is None:
        return None
    image = images.find(spec.framework.version)
    return images.version_tuple(image.version if image else spec.framework.version)


def _image(spec: Spec) -> images.TrainingImage | None:
    """The SageMaker image the job runs in; None for an explicit image_uri or a version with no image."""
    if spec.framework is None or spec.image_uri is not None:
        return None
    return images.find(spec.framework.version)


def _image_has(spec: Spec, feature: str) -> bool | None:
    """Whether the job's image holds `feature` (horovod | pipe_mode); None when dfm cannot know."""
    if spec.image_uri is not None:
        return None if spec.image_provides is None else feature in spec.image_provides
    image = _image(spec)
    return None if image is None else getattr(image, feature) is not None


def today() -> datetime.date:
    return datetime.date.today()


def check_framework(spec: Spec) -> list[Finding]:
    if spec.image_provides is not None and spec.image_uri is None:
        return [error("image_provides", "describes an image_uri: drop it (dfm knows what each framework image holds)")]
    if spec.framework is None:
        if spec.image_uri is None:
            return [error("framework", 'give framework: {version: "2.19", python: py312} or an image_uri')]
        return []
    if spec.image_uri is not None:
        return []  # a custom image: the version only informs the other rules
    version = spec.framework.version
    image = images.find(version)
    if image is None:
        known = ", ".join(images.IMAGES)
        if images.short_version(version) in images.NO_IMAGE:
            return [
                error(
                    "framework.version",
                    f"TensorFlow {version} has no SageMaker training image: use one of {known}, or an image_uri",
                )
            ]
        return [
            error(
                "framework.version",
                f"no SageMaker TensorFlow training image {version}: use one of {known}, or an image_uri",
            )
        ]
    if not image.sdk_v2 and images.image_uri(image, spec.region, "cpu") is None:
        return [
            error(
                "region",
                f"the TensorFlow {image.short} image is not published in {spec.region}: use another region or an "
                "image_uri",
            )
        ]
    if spec.framework.python is not None and spec.framework.python != image.python:
        return [
            error(
                "framework.python",
                f"TensorFlow {image.version} images have {image.python}, not {spec.framework.python}",
            )
        ]
    if datetime.date.fromisoformat(image.end_of_support) < today():
        newest = images.newest()
        return [
            warning(
                "framework.version",
                f"TensorFlow {image.short} images are past end of support ({image.end_of_support}): no more security "
                f"patches; the newest is {newest.short}",
            )
        ]
    return []


def check_horovod_in_image(spec: Spec) -> list[Finding]:
    """SageMaker starts mpirun on every image; a script importing Horovod dies there unless the image has it."""
    if spec.distribution_kind != "horovod":
        return []
    has = _image_has(spec, "horovod")
    if has is None and spec.image_uri is not None:
        return [
            warning(
                "image_uri", "dfm cannot see whether this image holds Horovod: say image_provides: [horovod] if it does"
            )
        ]
    if has is not False:
        return []
    where = "image_provides" if spec.image_uri is not None else "framework.version"
    what = "this image has" if spec.image_uri is not None else f"TensorFlow {spec.framework.version} images have"
    instead = "entry_point: deepfm-mirrored with " if spec.entry_point in contract.BUNDLED_ENTRY_POINTS else ""
    return [
        error(
            where,
            f"{what} no Horovod (the last image with Horovod is TF {images.LAST_HOROVOD_TF}): use framework.version "
            f'"{images.LAST_HOROVOD_TF}", or {instead}distribution: multi_worker_mirrored',
        )
    ]


def check_pipe_mode(spec: Spec) -> list[Finding]:
    """The bundled scripts read Pipe channels with PipeModeDataset; your own script may read the FIFOs itself."""
    if spec.data.mode != "Pipe":
        return []
    has = _image_has(spec, "pipe_mode")
    bundled = spec.entry_point in contract.BUNDLED_ENTRY_POINTS
    if has is None:
        hint = (
            "say image_provides: [pipe_mode] if it does" if spec.image_uri is not None else "make sure the image has it"
        )
        return [
            warning("data.mode", f"Pipe mode needs PipeModeDataset (sagemaker-tensorflow), built up to TF 2.14: {hint}")
        ]
    if has:
        return []
    what = "this image" if spec.image_uri is not None else f"the TF {spec.framework.version} image"
    if bundled:
        return [
            error(
                "data.mode",
                f"Pipe mode needs PipeModeDataset, which {what} lacks (the last with it is TF 2.14): use FastFile, or "
                "TF 2.14",
            )
        ]
    return [
        warning(
            "data.mode",
            f"{what} has no PipeModeDataset: your script must read the FIFOs /opt/ml/input/data/<channel>_<epoch> "
            "itself",
        )
    ]


def check_mirrored(spec: Spec) -> list[Finding]:
    if spec.distribution_kind != "multi_worker_mirrored":
        return []
    version = _tf_version(spec)
    if version is not None and version[:2] < MIRRORED_MIN_TF:
        return [error("distribution", f"multi_worker_mirrored needs TensorFlow >= 2.9, got {spec.framework.version}")]
    return []
