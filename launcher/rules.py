"""Cross-field checks on a Spec, run before anything is built.

Each rule is a small function `rule(spec) -> list[Finding]`; every message says what is wrong and how to
fix it. Errors stop `validate` and `launch` (exit 2); warnings are printed and carried into the Plan.
Neither the SageMaker SDK nor the API rejects most of these mistakes, so dfm must.
"""

from __future__ import annotations

import datetime
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal

from launcher import catalog, contract, images, request_limits, service_model
from launcher.spec import FileSystem, Spec, did_you_mean

MAX_CHANNELS = 20
TIMESTAMP_SUFFIX = len("-2024-01-01-00-00-00-000")
MAX_JOB_NAME = 63
MAX_BASE_NAME = MAX_JOB_NAME - TIMESTAMP_SUFFIX  # 39: sagemaker.utils.name_from_base keeps the same room
JOB_NAME = re.compile(r"[a-zA-Z0-9](-*[a-zA-Z0-9])*")
# Hyperparameters the SDK adds to every request (sagemaker_program, _submit_directory, _container_log_level,
# _job_name, _region, model_dir) and per distribution; they count towards the API's 100.
SDK_HYPERPARAMETERS = 6
MIRRORED_MIN_TF = (2, 9)  # the SDK's multi_worker_mirrored_strategy distribution needs TF >= 2.9
SDK_DISTRIBUTION_HYPERPARAMETERS = {"parameter_server": 1, "horovod": 3, "multi_worker_mirrored": 1, "none": 0}


@dataclass(frozen=True)
class Finding:
    field: str  # dotted path in the spec
    message: str  # what is wrong, and the fix
    severity: Literal["error", "warning"] = "error"

    def render(self, spec: Spec) -> str:
        return f"{spec.where(self.field)}: {self.field}: {self.message}" if self.field else f"{spec.where('')}: {self.message}"


def _error(field: str, message: str) -> Finding:
    return Finding(field, message, "error")


def _warning(field: str, message: str) -> Finding:
    return Finding(field, message, "warning")


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


def check_job_name(spec: Spec) -> list[Finding]:
    problems = []
    if not JOB_NAME.fullmatch(spec.name):
        problems.append(_error("name", f"'{spec.name}' is not a SageMaker job name: use letters, digits and '-' only, not at either end"))
    if len(spec.name) > MAX_BASE_NAME:
        problems.append(
            _error("name", f"{len(spec.name)} characters, at most {MAX_BASE_NAME}: dfm appends -YYYY-MM-DD-HH-MM-SS-mmm and job names stop at {MAX_JOB_NAME}")
        )
    return problems


def check_job_name_override(job_name: str) -> list[Finding]:
    """For `--job-name`: the full name, timestamp included."""
    if JOB_NAME.fullmatch(job_name) and len(job_name) <= MAX_JOB_NAME:
        return []
    return [_error("--job-name", f"'{job_name}' is not a SageMaker job name: at most {MAX_JOB_NAME} letters, digits and '-', not at either end")]


def channel_names(spec: Spec) -> list[str]:
    names = contract.training_channel_names(len(spec.train_sources))
    if spec.data.eval is not None:
        names.append(contract.EVAL_CHANNEL)
    names += list(spec.data.channels)
    config = spec.checkpoint_config
    if config is not None and config.file_system is not None:
        names.append(contract.CHECKPOINT_CHANNEL)
    return names


def check_channels(spec: Spec) -> list[Finding]:
    problems = []
    names = channel_names(spec)
    if len(names) > MAX_CHANNELS:
        problems.append(_error("data", f"{len(names)} channels, SageMaker allows {MAX_CHANNELS}: use fewer training paths or channels"))
    reserved = {contract.TRAIN_CHANNEL, contract.EVAL_CHANNEL, contract.CHECKPOINT_CHANNEL}
    for name in spec.data.channels:
        if name in reserved or re.fullmatch(r"train-\d+", name):
            problems.append(_error(f"data.channels.{name}", f"'{name}' is a channel dfm names itself: pick another name"))
    return problems


def check_hyperparameter_limits(spec: Spec) -> list[Finding]:
    """The count, SDK additions included; each name's and value's length is a request limit (check_request_limits)."""
    added = SDK_HYPERPARAMETERS + SDK_DISTRIBUTION_HYPERPARAMETERS[spec.distribution_kind]
    try:
        allowed = service_model.limit("HyperParameters", "max")
    except service_model.ModelUnavailable:
        return []
    if allowed is None or len(spec.hyperparameters) + added <= allowed:
        return []
    return [_error("hyperparameters", f"{len(spec.hyperparameters)} given and the SDK adds {added}; SageMaker allows {allowed} in all")]


def check_request_limits(spec: Spec) -> list[Finding]:
    """Enums, maximum lengths and values, patterns: what the service model says CreateTrainingJob refuses."""
    try:
        return [_error(field, message) for field, message in request_limits.problems(spec)]
    except service_model.ModelUnavailable as err:
        return [_warning("", f"{err}; SageMaker's limits on the request are not checked")]


def _bundled_type_problem(name: str, value: object) -> str | None:
    hparams = contract.bundled_hparams()
    default = hparams.DEFAULTS[name]
    choices = hparams.CHOICES.get(name)
    if choices is not None:
        if isinstance(value, bool) and "true" in choices:
            return None
        if not isinstance(value, str) or value.lower() not in choices:
            return f"expected one of {', '.join(choices)}, got {value!r}"
        return None
    if isinstance(default, bool):
        words = hparams.TRUE_WORDS + hparams.FALSE_WORDS
        if isinstance(value, bool) or (isinstance(value, (str, int)) and str(value).lower() in words):
            return None
        return f"expected true or false, got {value!r}"
    if isinstance(default, int):
        return None if isinstance(value, int) and not isinstance(value, bool) else f"expected an integer, got {value!r}"
    if isinstance(default, float):
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        return None if ok else f"expected a number, got {value!r}"
    if isinstance(default, list):
        if isinstance(value, list) and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in value):
            return None
        if isinstance(value, str) and re.fullmatch(r"\s*\d+(\s*,\s*\d+)*\s*", value):
            return None
        return f"expected a list of positive integers like [400, 400], got {value!r}"
    return None if isinstance(value, str) else f"expected a string, got {value!r}"


def check_bundled_hyperparameters(spec: Spec) -> list[Finding]:
    if spec.entry_point not in contract.BUNDLED_ENTRY_POINTS:
        return []
    problems = []
    known = contract.bundled_hparams().DEFAULTS
    for name, value in spec.hyperparameters.items():
        field = f"hyperparameters.{name}"
        if name not in known:
            problems.append(_error(field, f"{spec.entry_point} has no hyperparameter '{name}'{did_you_mean(name, known)}"))
            continue
        if name == "model_dir":
            problems.append(_error(field, "set by the SDK for every job; to checkpoint on EFS use checkpoints.file_system"))
            continue
        problem = _bundled_type_problem(name, value)
        if problem:
            problems.append(_error(field, problem))
    return problems


def check_boolean_hyperparameters(spec: Spec) -> list[Finding]:
    """The bundled scripts parse "True"/"False"; a user's argparse `type=bool` reads "False" as true."""
    if spec.entry_point in contract.BUNDLED_ENTRY_POINTS:
        return []
    return [
        _warning(f"hyperparameters.{name}", f"arrives as the string '{value}': parse it explicitly (argparse type=bool reads 'False' as true)")
        for name, value in spec.hyperparameters.items()
        if isinstance(value, bool)
    ]


def check_entry_point(spec: Spec) -> list[Finding]:
    bundled = contract.BUNDLED_ENTRY_POINTS.get(spec.entry_point)
    kind = spec.distribution_kind
    if bundled is not None:
        problems = []
        if spec.source_dir is not None:
            problems.append(_error("source_dir", f"{spec.entry_point} ships its own source dir: drop source_dir, or give your own script as entry_point"))
        if kind not in bundled.distributions:
            problems.append(_error("distribution", f"{spec.entry_point} runs with distribution {' or '.join(bundled.distributions)}, not {kind}"))
        return problems
    if spec.entry_point.startswith("deepfm"):
        hint = did_you_mean(spec.entry_point, contract.BUNDLED_ENTRY_POINTS)
        return [_error("entry_point", f"no bundled entry point '{spec.entry_point}'{hint}; bundled: {', '.join(contract.BUNDLED_ENTRY_POINTS)}")]
    if spec.source_dir is not None and spec.source_dir.startswith("s3://"):
        return []
    field = "entry_point"
    try:
        if spec.source_dir is not None:
            field = "source_dir"
            source_dir = Path(spec.resolve_path("source_dir", spec.source_dir))
            if not source_dir.is_dir():
                return [_error("source_dir", f"{source_dir} is not a folder")]
            field, script = "entry_point", source_dir / spec.entry_point
        else:
            script = Path(spec.resolve_path("entry_point", spec.entry_point))
        found = script.is_file()
    except (OSError, ValueError) as err:  # a name too long for the file system, a NUL in it
        return [_error(field, f"not a usable path: {getattr(err, 'strerror', None) or err}")]
    if not found:
        return [_error("entry_point", f"{script} not found: give a bundled name ({', '.join(contract.BUNDLED_ENTRY_POINTS)}) or your script's path")]
    return []


def check_framework(spec: Spec) -> list[Finding]:
    if spec.image_provides is not None and spec.image_uri is None:
        return [_error("image_provides", "describes an image_uri: drop it (dfm knows what each framework image holds)")]
    if spec.framework is None:
        if spec.image_uri is None:
            return [_error("framework", 'give framework: {version: "2.19", python: py312} or an image_uri')]
        return []
    if spec.image_uri is not None:
        return []  # a custom image: the version only informs the other rules
    version = spec.framework.version
    image = images.find(version)
    if image is None:
        known = ", ".join(images.IMAGES)
        if images.short_version(version) in images.NO_IMAGE:
            return [_error("framework.version", f"TensorFlow {version} has no SageMaker training image: use one of {known}, or an image_uri")]
        return [_error("framework.version", f"no SageMaker TensorFlow training image {version}: use one of {known}, or an image_uri")]
    if not image.sdk_v2 and images.image_uri(image, spec.region, "cpu") is None:
        return [_error("region", f"the TensorFlow {image.short} image is not published in {spec.region}: use another region or an image_uri")]
    if spec.framework.python is not None and spec.framework.python != image.python:
        return [_error("framework.python", f"TensorFlow {image.version} images have {image.python}, not {spec.framework.python}")]
    if datetime.date.fromisoformat(image.end_of_support) < today():
        newest = images.newest()
        return [_warning("framework.version", f"TensorFlow {image.short} images are past end of support ({image.end_of_support}): no more security patches; the newest is {newest.short}")]
    return []


def check_horovod_in_image(spec: Spec) -> list[Finding]:
    """SageMaker starts mpirun on every image; a script importing Horovod dies there unless the image has it."""
    if spec.distribution_kind != "horovod":
        return []
    has = _image_has(spec, "horovod")
    if has is None and spec.image_uri is not None:
        return [_warning("image_uri", "dfm cannot see whether this image holds Horovod: say image_provides: [horovod] if it does")]
    if has is not False:
        return []
    where = "image_provides" if spec.image_uri is not None else "framework.version"
    what = "this image has" if spec.image_uri is not None else f"TensorFlow {spec.framework.version} images have"
    instead = "entry_point: deepfm-mirrored with " if spec.entry_point in contract.BUNDLED_ENTRY_POINTS else ""
    return [_error(where, f'{what} no Horovod (the last image with Horovod is TF {images.LAST_HOROVOD_TF}): use framework.version "{images.LAST_HOROVOD_TF}", or {instead}distribution: multi_worker_mirrored')]


def check_pipe_mode(spec: Spec) -> list[Finding]:
    """The bundled scripts read Pipe channels with PipeModeDataset; your own script may read the FIFOs itself."""
    if spec.data.mode != "Pipe":
        return []
    has = _image_has(spec, "pipe_mode")
    bundled = spec.entry_point in contract.BUNDLED_ENTRY_POINTS
    if has is None:
        hint = "say image_provides: [pipe_mode] if it does" if spec.image_uri is not None else "make sure the image has it"
        return [_warning("data.mode", f"Pipe mode needs PipeModeDataset (sagemaker-tensorflow), built up to TF 2.14: {hint}")]
    if has:
        return []
    what = "this image" if spec.image_uri is not None else f"the TF {spec.framework.version} image"
    if bundled:
        return [_error("data.mode", f"Pipe mode needs PipeModeDataset, which {what} lacks (the last with it is TF 2.14): use FastFile, or TF 2.14")]
    return [_warning("data.mode", f"{what} has no PipeModeDataset: your script must read the FIFOs /opt/ml/input/data/<channel>_<epoch> itself")]


def check_pipe_channels_per_worker(spec: Spec) -> list[Finding]:
    """Each Horovod rank on a host reads its own FIFO; with fewer channels than ranks, ranks wait forever."""
    if spec.data.mode != "Pipe" or spec.distribution_kind != "horovod":
        return []
    channels, ranks = len(spec.train_sources), spec.processes_per_host
    if channels >= ranks:
        return []
    return [
        _error("data.train", f"Pipe mode with {ranks} processes per host needs at least {ranks} training paths (one FIFO per process), got {channels}: list {ranks} paths (the same path may repeat), or use File/FastFile")
    ]


def check_processes_per_host(spec: Spec) -> list[Finding]:
    if spec.distribution_kind != "horovod":
        return []
    info = catalog.instance(spec.instance.type)
    if info is None:
        return []
    ranks = spec.processes_per_host
    if info.gpus and ranks > info.gpus:
        return [_error("distribution.horovod.processes_per_host", f"{ranks} processes, but {spec.instance.type} has {info.gpus} GPUs: use at most {info.gpus}")]
    if not info.gpus and ranks > info.vcpus:
        return [_error("distribution.horovod.processes_per_host", f"{ranks} processes, but {spec.instance.type} has {info.vcpus} vCPUs: use at most {info.vcpus}")]
    if info.gpus and ranks < info.gpus:
        return [_warning("distribution.horovod.processes_per_host", f"{ranks} processes on {info.gpus} GPUs leaves {info.gpus - ranks} idle: use {info.gpus}")]
    return []


def check_instance_known(spec: Spec) -> list[Finding]:
    """A type the API lacks is a request-limit error; one it has but the catalogue lacks, a warning."""
    info = catalog.instance(spec.instance.type)
    if info is not None and info.accelerators:
        return [_warning("instance.type", f"{spec.instance.type} trains on {info.accelerators}, which SageMaker's TensorFlow images do not use: pick a CPU or GPU type")]
    if info is not None:
        return []
    try:
        if spec.instance.type not in service_model.enum("TrainingInstanceType"):
            return []
    except service_model.ModelUnavailable:
        pass
    return [_warning("instance.type", f"{spec.instance.type} is not in dfm's catalogue: no cost estimate, no GPU/vCPU checks")]


def check_parameter_server(spec: Spec) -> list[Finding]:
    if spec.distribution_kind != "parameter_server":
        return []
    problems = []
    if spec.instance.count == 1:
        problems.append(_warning("instance.count", "a parameter server on one host only adds overhead: use count >= 2, or distribution: none"))
    info = catalog.instance(spec.instance.type)
    if info is not None and info.gpus > 1:
        problems.append(
            _warning("instance.type", f"the parameter server runs one worker per host, so {info.gpus - 1} of {info.gpus} GPUs idle: use Horovod for multi-GPU hosts")
        )
    if spec.instance.count > 1 and spec.checkpoint_config is None:
        problems.append(_error("checkpoints", "a multi-host parameter server needs a shared model/checkpoint location: remove `checkpoints: false`, or give checkpoints.file_system (EFS)"))
    return problems


def check_spot(spec: Spec) -> list[Finding]:
    if spec.spot is None:
        return []
    problems = []
    if spec.spot.max_wait < spec.max_run:
        problems.append(_error("spot.max_wait", f"{spec.spot.max_wait} is less than max_run {spec.max_run}: max_wait counts the run too; use max_wait >= {spec.max_run}"))
    if spec.checkpoint_config is None:
        problems.append(_error("checkpoints", "spot jobs are interrupted and resume from checkpoints: remove `checkpoints: false`"))
    if spec.warm_pool_seconds:
        problems.append(_error("warm_pool_seconds", "SageMaker managed warm pools cannot be used with spot instances: drop warm_pool_seconds, or spot"))
    return problems


def check_mirrored(spec: Spec) -> list[Finding]:
    if spec.distribution_kind != "multi_worker_mirrored":
        return []
    version = _tf_version(spec)
    if version is not None and version[:2] < MIRRORED_MIN_TF:
        return [_error("distribution", f"multi_worker_mirrored needs TensorFlow >= 2.9, got {spec.framework.version}")]
    return []


def check_s3_shard(spec: Spec) -> list[Finding]:
    if not spec.data.s3_shard:
        return []
    if not any(isinstance(s, str) for s in spec.train_sources):
        return [_warning("data.s3_shard", "no S3 training channel to shard: it has no effect on file systems")]
    if spec.instance.count == 1:
        return []
    return [
        _warning("data.s3_shard", f"ShardedByS3Key gives each of the {spec.instance.count} hosts whole objects: each training prefix needs at least {spec.instance.count} files, or hosts sit idle (checked at launch, not offline)")
    ]


def check_file_systems(spec: Spec) -> list[Finding]:
    used = [f"data.train.{i}" if isinstance(spec.data.train, list) else "data.train" for i, s in enumerate(spec.train_sources) if isinstance(s, FileSystem)]
    used += ["data.eval"] if isinstance(spec.data.eval, FileSystem) else []
    used += [f"data.channels.{n}" for n, s in spec.data.channels.items() if isinstance(s, FileSystem)]
    config = spec.checkpoint_config
    used += ["checkpoints.file_system"] if config is not None and config.file_system is not None else []
    if not used or spec.vpc is not None:
        return []
    return [_error(used[0], "EFS/FSx channels are reached inside your VPC: add vpc: {subnets: [...], security_group_ids: [...]}")]


def check_local_channels(spec: Spec) -> list[Finding]:
    names = channel_names(spec)
    return [
        _error(f"local.channels.{name}", f"no channel '{name}' in this spec{did_you_mean(name, names)}; channels: {', '.join(names)}")
        for name in spec.local.channels
        if name not in names
    ]


RULES: tuple[Callable[[Spec], list[Finding]], ...] = (
    check_job_name,
    check_channels,
    check_hyperparameter_limits,
    check_request_limits,
    check_bundled_hyperparameters,
    check_boolean_hyperparameters,
    check_entry_point,
    check_framework,
    check_horovod_in_image,
    check_pipe_mode,
    check_pipe_channels_per_worker,
    check_processes_per_host,
    check_instance_known,
    check_parameter_server,
    check_spot,
    check_mirrored,
    check_s3_shard,
    check_file_systems,
    check_local_channels,
)


def check(spec: Spec) -> list[Finding]:
    """Every finding of every rule, errors and warnings, in rule order."""
    return [finding for rule in RULES for finding in rule(spec)]


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "error"]


def warnings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.severity == "warning"]
