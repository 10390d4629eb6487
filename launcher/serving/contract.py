"""SageMaker's TensorFlow Serving contract, as data. Pure (no TensorFlow, no I/O).

- The artifact: TensorFlow Serving is given every folder holding `<digits>/saved_model.pb` (the digits are the
  version; the folder above names the model, `model` for the artifact's root); `code/` belongs at the root.
- The front (`/invocations`): a content type, a body and the custom-attributes header -> a TF Serving REST call
  (TF Serving's REST predict itself is in `rest`).

The words are the container's (aws/deep-learning-containers, tensorflow/inference/docker/build_artifacts/sagemaker:
tfs_utils.find_models, the front's request handling) and TF Serving's (tensorflow_serving/util/json_tensor.cc).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Iterable


NO_MODELS = "no SavedModel bundles found!"
ROOT_MODEL = "model"  # the name of a model whose versions sit at the artifact's root (/opt/ml/model/<digits>/)
CUSTOM_ATTRIBUTES = "X-Amzn-SageMaker-Custom-Attributes"
JSON_TYPES = ("application/json", "application/jsonlines", "application/jsons")
CSV_TYPE = "text/csv"
METHODS = ("predict", "classify", "regress")
MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$")
DEFAULT_SIGNATURE = "serving_default"


class ServingError(Exception):
    """A refused request: the HTTP status and the message the container answers with (`{"error": message}`)."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message

    def body(self) -> dict[str, str]:
        return {"error": self.message}


def invalid(message: str) -> ServingError:
    return ServingError(400, message)


# ------------------------------------------------------------------------------------------------ the artifact
@dataclass(frozen=True)
class Model:
    name: str
    folder: str  # relative to the artifact's root ("" for the root itself)
    versions: tuple[int, ...]  # ascending; the last is the one served when a request names none


@dataclass(frozen=True)
class Layout:
    """What the container finds in an artifact (paths relative to its root, POSIX)."""

    models: tuple[Model, ...]
    problems: tuple[str, ...] = ()  # each names the place and the fix; any problem refuses the artifact
    notes: tuple[str, ...] = ()

    @property
    def default(self) -> Model:
        return self.models[0]


def find_models(files: Iterable[str]) -> Layout:
    """The models the container serves from an artifact holding `files` (relative paths), and what is wrong with
    it. The container walks the artifact for `saved_model.pb` whose folder's name is all digits; the folder above
    it is one model (named by its base name, `model` at the root); none found: "no SavedModel bundles found!"."""
    paths = sorted(PurePosixPath(f) for f in files)
    found: dict[str, set[int]] = {}
    loose: list[PurePosixPath] = []
    for path in paths:
        if path.name != "saved_model.pb":
            continue
        version = path.parent
        if version.name.isdigit():
            found.setdefault(str(version.parent) if str(version.parent) != "." else "", set()).add(int(version.name))
        else:
            loose.append(path)
    models = tuple(
        Model(PurePosixPath(folder).name if folder else ROOT_MODEL, folder, tuple(sorted(v)))
        for folder, v in sorted(found.items(), key=lambda kv: (kv[0].count("/"), kv[0]))
    )
    problems: list[str] = []
    if not models:
        problems.append(_no_models_problem(loose))
    else:
        names = [m.name for m in models]
        for name in sorted({n for n in names if names.count(n) > 1}):
            where = ", ".join(m.folder or "." for m in models if m.name == name)
            problems.append(
                f"two models are named {name!r} ({where}): TensorFlow Serving names a model by its folder's "
                "base name; rename one folder"
            )
    problems += _code_problems(paths, models)
    notes = ()
    if PurePosixPath("code", "inference.py") in paths:
        notes = ("code/inference.py: its handlers answer /invocations (TF Serving's routes answer as they are)",)
    return Layout(models, tuple(problems), notes)


def _no_models_problem(loose: list[PurePosixPath]) -> str:
    if not loose:
        return (
            f"{NO_MODELS} (no saved_model.pb anywhere in it): the artifact must hold a SavedModel folder named by "
            "its version, e.g. 1/saved_model.pb and 1/variables/"
        )
    folder = loose[0].parent
    where = "the artifact's root" if str(folder) == "." else f"{folder}/"
    inside = "" if str(folder) == "." else f"{folder}/"
    return (
        f"{NO_MODELS} (saved_model.pb is in {where}, not in a folder named by a version number): "
        f"move the SavedModel into a version folder, e.g. {inside}1/saved_model.pb "
        f"(tar -czf model.tar.gz -C <parent> 1 with the SavedModel folder renamed 1)"
    )


def _code_problems(paths: list[PurePosixPath], models: tuple[Model, ...]) -> list[str]:
    """`code/inference.py` (with `code/requirements.txt`, `code/lib/`) belongs at the artifact's root; a `code/`
    inside a model or version folder is never read by the container."""
    problems = []
    version_folders = {
        PurePosixPath(m.folder, str(v)) if m.folder else PurePosixPath(str(v)) for m in models for v in m.versions
    }
    for path in paths:
        if path.name != "inference.py" or path.parent.name != "code" or str(path.parent.parent) == ".":
            continue
        holder = path.parent.parent
        inside = next((str(v) for v in version_folders if holder == v or v in holder.parents), None)
        where = f"inside the version folder {inside}/" if inside else f"in {holder}/"
        problems.append(
            f"{path} is {where}: the container reads inference handlers only from code/inference.py at the "
            f"artifact's root (beside the model's version folders); move {path.parent}/ to code/"
        )
    return problems


# ------------------------------------------------------------------------------------------------ the front
@dataclass(frozen=True)
class Route:
    """Which servable a call goes to: model name, version (None: the highest), method."""

    model: str
    version: int | None = None
    method: str = "predict"


def custom_attributes(header: str | None) -> dict[str, str]:
    """`tfs-model-name=...,tfs-model-version=...,tfs-method=...` -> its tfs-* pairs (others are ignored)."""
    attributes: dict[str, str] = {}
    for pair in re.findall(r"tfs-[a-z\-]+=[^,]+", header or ""):
        parts = pair.split("=")
        if len(parts) == 2:
            attributes[parts[0]] = parts[1]
    return attributes


def invocation_route(header: str | None, default_model: str) -> Route:
    """The TF Serving call `/invocations` makes: the default model's latest version's predict, unless the
    custom-attributes header chooses another model, version or method (each checked as the front checks it)."""
    attributes = custom_attributes(header)
    name = attributes.get("tfs-model-name", default_model)
    if not MODEL_NAME.match(name):
        raise invalid("invalid tfs-model-name")
    version = attributes.get("tfs-model-version")
    if version is not None and not version.isdigit():
        raise invalid("invalid tfs-model-version")
    method = attributes.get("tfs-method", "predict")
    if method not in METHODS:
        raise invalid("invalid tfs-method")
    return Route(name, int(version) if version is not None else None, method)


def media_type(content_type: str | None) -> str:
    return (content_type or "").split(";")[0].strip().lower()


def front_body(content_type: str | None, body: str) -> str:
    """An `/invocations` body -> the JSON body TF Serving gets: TF Serving's own JSON (`instances`, `inputs`,
    `examples`) as it is; JSON lines as `instances`; other JSON wrapped as `instances`; CSV rows as `instances`
    (numbers as numbers, other fields as strings). Other content types: 415."""
    kind = media_type(content_type)
    if kind in JSON_TYPES:
        if re.search(r'"(instances|inputs|examples)"\s*:', body):
            return body
        if re.search(r"[}\]]\s*[\[{]", body):
            lines = [line.strip() for line in body.strip().splitlines() if line.strip()]
            return '{"instances":' + ("[" + ",".join(lines) + "]" if len(lines) > 1 else "".join(lines)) + "}"
        return '{"instances":' + (body if re.match(r"^\s*\[\s*\[", body) else "[" + body + "]") + "}"
    if kind == CSV_TYPE:
        return json.dumps({"instances": [_csv_row(line) for line in body.strip().splitlines() if line.strip()]})
    raise ServingError(415, f"Unsupported Media Type: {kind or 'Unknown'}")


NUMBER = re.compile(r"^-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?$")


def _csv_row(line: str) -> Any:
    fields = _csv_fields(line.strip())
    values = [json.loads(f.strip()) if NUMBER.match(f.strip()) else f for f in fields]
    return values if len(values) > 1 else values[0]


def _csv_fields(line: str) -> list[str]:
    fields, current, quoted, i = [], "", False, 0
    while i < len(line):
        c = line[i]
        if c == '"':
            if quoted and i + 1 < len(line) and line[i + 1] == '"':
                current, i = current + '"', i + 1
            else:
                quoted = not quoted
        elif c == "," and not quoted:
            fields.append(current)
            current = ""
        else:
            current += c
        i += 1
    return fields + [current]
