"""The SavedModels of an artifact, loaded with TensorFlow: each version's signatures (as TF Serving reads them
from saved_model.pb) and its predict. What TensorFlow Serving does with a model, in Python around
`tf.saved_model.load` (no TF Serving binary exists here)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from launcher.errors import DfmError
from launcher.serving import contract, rest
from launcher.serving.artifact import Artifact

SERVE_TAG = "serve"


@dataclass(frozen=True)
class VersionInfo:
    folder: Path
    signatures: Mapping[str, rest.Signature]
    signature_defs: Mapping[str, Any]  # each SignatureDef as TF Serving's metadata writes it (JSON)


def read_signatures(folder: Path) -> VersionInfo:
    """The `serve` MetaGraph's signatures of the SavedModel in `folder`, read from saved_model.pb (nothing
    loaded or run). A file TensorFlow cannot read: one line, exit 1."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TensorFlow's start-up lines are not the user's
    from google.protobuf import json_format
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2
    from tensorflow.python.framework import dtypes

    saved = saved_model_pb2.SavedModel()
    try:
        saved.ParseFromString((folder / "saved_model.pb").read_bytes())
    except (DecodeError, OSError) as err:
        raise DfmError(f"{folder / 'saved_model.pb'}: not a SavedModel TensorFlow can read ({err})", 1) from None
    graphs = [g for g in saved.meta_graphs if SERVE_TAG in g.meta_info_def.tags]
    if not graphs:
        raise DfmError(
            f"{folder}: the SavedModel has no MetaGraph tagged 'serve'; export it with tf.saved_model.save", 1
        )
    defs = graphs[0].signature_def

    def spec(info) -> rest.TensorSpec:
        shape = None if info.tensor_shape.unknown_rank else tuple(d.size for d in info.tensor_shape.dim)
        return rest.TensorSpec(dtypes.as_dtype(info.dtype).name, shape)

    signatures = {
        name: rest.Signature(
            {k: spec(v) for k, v in sig.inputs.items()}, {k: spec(v) for k, v in sig.outputs.items()}, sig.method_name
        )
        for name, sig in defs.items()
        if not name.startswith("__")  # __saved_model_init_op: the loader's, not a serving signature
    }
    as_json = {name: json_format.MessageToDict(sig, preserving_proto_field_name=True) for name, sig in defs.items()}
    return VersionInfo(folder, signatures, as_json)


def describe(artifact: Artifact) -> dict[str, dict[int, VersionInfo]]:
    """model name -> version -> its signatures."""
    return {
        model.name: {v: read_signatures(artifact.model_folder(model, v)) for v in model.versions}
        for model in artifact.layout.models
    }


class LoadedModels:
    """Every version of every model, loaded: `predict(route, body)` as TF Serving's REST predict answers it."""

    def __init__(self, artifact: Artifact, described: Mapping[str, Mapping[int, VersionInfo]]):
        import tensorflow as tf

        self.described = described
        self.default = artifact.layout.default.name
        self._loaded: dict[tuple[str, int], Any] = {}
        for name, versions in described.items():
            for version, info in versions.items():
                try:
                    self._loaded[(name, version)] = tf.saved_model.load(str(info.folder))
                except Exception as err:  # noqa: BLE001 (TensorFlow's load errors have no common type)
                    detail = " ".join(str(err).split())[:300]
                    raise DfmError(
                        f"{info.folder}: TensorFlow cannot load this SavedModel ({type(err).__name__}: {detail})", 1
                    ) from None

    def version_of(self, name: str, version: int | None) -> int:
        versions = self.described.get(name)
        if not versions or (version is not None and version not in versions):
            request = f"Latest({name})" if version is None else f"Specific({name}, {version})"
            raise contract.ServingError(404, f"Servable not found for request: {request}")
        return max(versions) if version is None else version

    def predict(self, route: contract.Route, body: str) -> dict[str, Any]:
        import tensorflow as tf

        version = self.version_of(route.model, route.version)
        doc = rest.parse_json(body)
        name = rest.signature_name(doc)
        info = self.described[route.model][version]
        if name not in info.signatures:
            raise rest.unknown_signature(name)
        signature = info.signatures[name]
        if route.method != "predict":
            wanted = f"tensorflow/serving/{route.method}"
            if signature.method_name != wanted:
                raise contract.invalid(
                    f"Expected {route.method} signature method_name to be {wanted}. Was: {signature.method_name}"
                )
            raise contract.ServingError(501, f"dfm serve --local answers predict only, not {route.method}")
        request = rest.predict_request(doc, signature, name)
        function = self._loaded[(route.model, version)].signatures[name]
        tensors = {
            key: tf.constant(array, dtype=tf.string if signature.inputs[key].dtype == "string" else array.dtype)
            for key, array in request.inputs.items()
        }
        try:
            outputs = function(**tensors)
        except (tf.errors.InvalidArgumentError, ValueError, TypeError) as err:
            raise contract.invalid(" ".join(str(err).split())[:500]) from None
        except tf.errors.OpError as err:  # TF Serving answers its other error codes as server errors
            raise contract.ServingError(500, " ".join(str(err).split())[:500]) from None
        arrays = {key: np.asarray(value.numpy()) for key, value in outputs.items()}
        return rest.predict_response(arrays, request.row_format)
