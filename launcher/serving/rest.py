"""TF Serving's REST predict, as data. Pure (numpy only, no TensorFlow, no I/O): a JSON body (`instances` rows or
`inputs` columns) -> the signature's input arrays, and the outputs -> `predictions` / `outputs`, each error as TF
Serving words it (tensorflow_serving/util/json_tensor.cc); and the bodies a signature takes.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from launcher.serving.contract import DEFAULT_SIGNATURE, ServingError, invalid


@dataclass(frozen=True)
class TensorSpec:
    dtype: str  # numpy's name: float32, int64, string, ...
    shape: tuple[int, ...] | None  # -1 where any size goes; None: any rank


@dataclass(frozen=True)
class Signature:
    inputs: Mapping[str, TensorSpec]
    outputs: Mapping[str, TensorSpec]
    method_name: str = "tensorflow/serving/predict"


@dataclass(frozen=True)
class PredictRequest:
    signature_name: str
    inputs: dict[str, np.ndarray] = field(default_factory=dict)
    row_format: bool = True  # instances (rows) -> predictions; inputs (columns) -> outputs


DTYPES = {
    "float32": np.float32,
    "float64": np.float64,
    "float16": np.float16,
    "int64": np.int64,
    "int32": np.int32,
    "int16": np.int16,
    "int8": np.int8,
    "uint8": np.uint8,
    "bool": np.bool_,
    "string": object,
}


def parse_json(body: str) -> dict[str, Any]:
    """TF Serving's JSON parse: an object, or a 400 with rapidjson's words where Python's map onto them."""
    if not body.strip():
        raise invalid("JSON Parse error: The document is empty")
    try:
        doc = json.loads(body)
    except json.JSONDecodeError as err:
        raise invalid(f"JSON Parse error: {_RAPIDJSON.get(err.msg, err.msg)} at offset: {err.pos}") from None
    if not isinstance(doc, dict):
        raise invalid(f"JSON Value: {_compact(doc)} Is not object")
    return doc


_RAPIDJSON = {
    "Expecting value": "Invalid value.",
    "Extra data": "The document root must not be followed by other values.",
    "Expecting property name enclosed in double quotes": "Missing a name for object member.",
    "Expecting ':' delimiter": "Missing a colon after a name of object member.",
    "Expecting ',' delimiter": "Missing a comma or ']' after an array element.",
    "Unterminated string starting at": "Missing a closing quotation mark in string.",
}


def signature_name(doc: Mapping[str, Any]) -> str:
    name = doc.get("signature_name", DEFAULT_SIGNATURE)
    if not isinstance(name, str):
        raise invalid(
            f"JSON Value: {_compact(doc)} not formatted correctly. 'signature_name' key must be a string value."
        )
    return name or DEFAULT_SIGNATURE


def unknown_signature(name: str) -> ServingError:
    return invalid(f'Serving signature name: "{name}" not found in signature def')


def predict_request(doc: Mapping[str, Any], signature: Signature, name: str) -> PredictRequest:
    """A parsed predict body -> the signature's inputs as arrays of its dtypes, checked as TF Serving checks them
    (rows: each instance an object of every input when there are several; columns: an object of every input)."""
    specs = signature.inputs
    if not specs:
        raise invalid(f"Failed to get input map for signature: {name or 'DEFAULT'}")
    has_rows, has_columns = "instances" in doc, "inputs" in doc
    if has_rows and has_columns:
        raise invalid(
            f"JSON Value: {_compact(doc)} Not formatted correctly expecting only one of 'inputs' or 'instances' keys "
            "to exist "
        )
    if has_rows:
        rows = doc["instances"]
        if not isinstance(rows, list):
            raise invalid(f"JSON Value: {_compact(doc)} Excepting 'instances' to be an list/array")
        if not rows:
            raise invalid(f"JSON Value: {_compact(doc)} No values in 'instances' array")
        arrays = _from_instances(rows, specs)
    elif has_columns:
        arrays = _from_inputs(doc["inputs"], specs)
    else:
        raise invalid("Missing 'inputs' or 'instances' key")
    for key, array in arrays.items():
        _check_shape(key, array.shape, specs[key])
    return PredictRequest(name, arrays, has_rows)


def _is_object(value: Any) -> bool:
    return isinstance(value, dict) and not _is_b64(value)


def _is_b64(value: Any) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def _from_instances(rows: list, specs: Mapping[str, TensorSpec]) -> dict[str, np.ndarray]:
    if not _is_object(rows[0]) and len(specs) > 1:
        raise invalid(
            "instances is a plain list, but expecting list of objects as multiple input tensors required as per "
            "tensorinfo_map"
        )
    named = _is_object(rows[0])
    names = sorted(specs)
    columns: dict[str, list] = {n: [] for n in names} if named else {names[0]: []}
    shapes: dict[str, tuple[tuple[int, ...], int]] = {}
    for index, row in enumerate(rows):
        if named:
            if not _is_object(row):
                raise invalid(f"Expecting object but got list at item {index} of input list")
            for key, value in row.items():
                if key not in specs:
                    error = f"JSON object: does not have named input: {key}"
                    raise invalid(f"Failed to process element: {index} key: {key} of 'instances' list. Error: {error}")
                try:
                    _add_item(key, value, specs[key].dtype, shapes, columns)
                except ServingError as err:
                    raise invalid(
                        f"Failed to process element: {index} key: {key} of 'instances' list. Error: {err.message}"
                    ) from None
            if set(row) != set(names):
                raise invalid(
                    f"Failed to process element: {index} of 'instances' list. JSON object: {_compact(row)} keys must "
                    f"be equal to: {','.join(names)}"
                )
        else:
            if _is_object(row):
                raise invalid(f"Expecting value/list but got object at item {index} of input list")
            try:
                _add_item(names[0], row, specs[names[0]].dtype, shapes, columns)
            except ServingError as err:
                raise invalid(f"Failed to process element: {index} of 'instances' list. Error: {err.message}") from None
    return {key: _array(values, specs[key].dtype, (len(rows), *shapes[key][0])) for key, values in columns.items()}


def _add_item(key, value, dtype, shapes, columns) -> None:
    shape = _dense_shape(value)
    flat: list = []
    _fill(value, 0, shape, dtype, flat)
    if key not in shapes:
        shapes[key] = (shape, len(flat))
    elif shapes[key][1] != len(flat):
        raise invalid(f"Expecting tensor size: {shapes[key][1]} but got: {len(flat)}")
    elif shapes[key][0] != shape:
        raise invalid(f"Expecting shape {_shape_text(shapes[key][0])} but got: {_shape_text(shape)}")
    columns[key].extend(flat)


def _from_inputs(value: Any, specs: Mapping[str, TensorSpec]) -> dict[str, np.ndarray]:
    if not isinstance(value, dict) or _is_b64(value):
        if len(specs) > 1:
            raise invalid(
                "inputs is a plain value/list, but expecting an object as multiple input tensors required as per "
                "tensorinfo_map"
            )
        key = next(iter(specs))
        return {key: _tensor(value, specs[key].dtype)}
    arrays = {}
    for key in sorted(specs):
        if key not in value:
            raise invalid(f"Missing named input: {key} in 'inputs' object.")
        arrays[key] = _tensor(value[key], specs[key].dtype)
    return arrays


def _tensor(value: Any, dtype: str) -> np.ndarray:
    shape = _dense_shape(value)
    flat: list = []
    _fill(value, 0, shape, dtype, flat)
    return _array(flat, dtype, shape)


def _dense_shape(value: Any) -> tuple[int, ...]:
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if not value:
            break
        value = value[0]
    return tuple(shape)


def _fill(value: Any, level: int, shape: tuple[int, ...], dtype: str, out: list) -> None:
    if not isinstance(value, list):
        if level != len(shape):
            raise invalid(
                f"JSON Value: {_compact(value)} found at incorrect level: {level + 1} in the JSON DOM. Expected at "
                f"level: {len(shape)}"
            )
        out.append(_scalar(value, dtype))
        return
    if level >= len(shape):
        raise invalid(f"Encountered list at unexpected level: {level} expected < {len(shape)}")
    if len(value) != shape[level]:
        raise invalid(
            f"Encountered list at unexpected size: {len(value)} at level: {level} expected size: {shape[level]}"
        )
    for item in value:
        _fill(item, level + 1, shape, dtype, out)


def _scalar(value: Any, dtype: str) -> Any:
    if dtype == "string":
        if _is_b64(value):
            import base64
            import binascii

            try:
                return base64.b64decode(value["b64"], validate=True)
            except (binascii.Error, ValueError):
                raise invalid("Unable to base64 decode") from None
        if isinstance(value, str):
            return value.encode()
        raise _type_error(value, "string")
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if dtype in ("float32", "float64", "float16"):
        if not number:
            raise _type_error(value, dtype)
        exact, largest = _limits(dtype)
        lossy = isinstance(value, int) and abs(value) > exact
        if lossy or (math.isfinite(value) and abs(value) > largest):
            raise invalid(f"Cannot convert JSON value: {_compact(value)} to {dtype} without loss of precision.")
        return value
    if dtype == "bool":
        if not isinstance(value, bool):
            raise _type_error(value, dtype)
        return value
    if not (isinstance(value, int) and not isinstance(value, bool)):
        raise _type_error(value, dtype)
    low, high = _limits(dtype)
    if not low <= value <= high:
        raise _type_error(value, dtype)
    return value


@functools.lru_cache(maxsize=None)
def _limits(dtype: str) -> tuple[Any, Any]:
    """A float's (largest integer it holds exactly, largest value); an integer's (min, max). Per dtype, once: numpy's
    finfo / iinfo per scalar were most of a request's time."""
    if dtype in ("float32", "float64", "float16"):
        info = np.finfo(DTYPES[dtype])
        return (1 << info.nmant + 1) - 1, float(info.max)
    info = np.iinfo(DTYPES[dtype])
    return int(info.min), int(info.max)


def _type_error(value: Any, dtype: str) -> ServingError:
    return invalid(f"JSON Value: {_compact(value)} Type: {_json_type(value)} is not of expected type: {dtype}")


def _json_type(value: Any) -> str:
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, dict):
        return "Object"
    if isinstance(value, list):
        return "Array"
    if isinstance(value, str):
        return "String"
    return "Number"


def _array(flat: list, dtype: str, shape: tuple[int, ...]) -> np.ndarray:
    if dtype == "string":
        array = np.empty(len(flat), dtype=object)
        array[:] = flat
        return array.reshape(shape)
    return np.asarray(flat, dtype=DTYPES[dtype]).reshape(shape)


def _check_shape(key: str, shape: tuple[int, ...], spec: TensorSpec) -> None:
    """The signature's shape, where TF Serving's session would refuse the tensor."""
    expected = spec.shape
    if expected is None:
        return
    if len(shape) != len(expected) or any(e not in (-1, s) for e, s in zip(expected, shape)):
        raise invalid(
            f"input {key}: got shape {_shape_text(shape)}, the signature takes {_shape_text(expected)} "
            f"({spec.dtype}; -1 is any size)"
        )


def _shape_text(shape: Iterable[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def _compact(value: Any) -> str:
    text = json.dumps(value, separators=(",", ":"), allow_nan=True)
    return text if len(text) <= 200 else text[:197] + "..."


def predict_response(outputs: Mapping[str, np.ndarray], row_format: bool) -> dict[str, Any]:
    """Outputs -> TF Serving's answer: rows (`predictions`: one value per row for a single output, an object of
    every output per row for several) or columns (`outputs`: the tensor, or an object of tensors)."""
    names = sorted(outputs)
    if not row_format:
        if len(names) == 1:
            return {"outputs": _json_values(outputs[names[0]])}
        return {"outputs": {n: _json_values(outputs[n]) for n in names}}
    if len(names) == 1:
        return {"predictions": _json_values(outputs[names[0]])}
    sizes = {outputs[n].shape[0] if outputs[n].ndim else None for n in names}
    if len(sizes) != 1 or None in sizes:
        raise invalid("Batch size for output tensors must be the same; use 'inputs' (columns) for this signature")
    columns = {n: _json_values(outputs[n]) for n in names}
    return {"predictions": [{n: columns[n][i] for n in names} for i in range(sizes.pop())]}


def _json_values(array: np.ndarray) -> Any:
    """float32 written as its shortest decimal (as TF Serving writes floats), strings as text, NaN as NaN."""
    array = np.asarray(array)
    if array.dtype in (np.float32, np.float16):
        shortest = [float(str(x)) for x in array.ravel()]  # each np.float32's shortest decimal
        return np.array(shortest, dtype=object).reshape(array.shape).tolist()
    if array.dtype == object or array.dtype.kind == "S":
        return np.vectorize(lambda b: b.decode("utf-8", "replace") if isinstance(b, bytes) else b, otypes=[object])(
            array
        ).tolist()
    return array.tolist()


def dumps(doc: Any) -> str:
    """JSON as TF Serving writes it (NaN and Infinity as bare words)."""
    return json.dumps(doc, allow_nan=True)


# ------------------------------------------------------------------------------------------------ what a request is
def example_instance(signature: Signature) -> Any:
    """One row of a request body for `signature` (zeros, "" for strings), in the `instances` form."""
    values = {key: _example_value(spec) for key, spec in sorted(signature.inputs.items())}
    if len(values) == 1:
        return next(iter(values.values()))
    return values


def _example_value(spec: TensorSpec) -> Any:
    leaf: Any = "" if spec.dtype == "string" else (False if spec.dtype == "bool" else 0)
    if spec.dtype.startswith("float"):
        leaf = 0.0
    for size in reversed((spec.shape or (-1,))[1:]):
        leaf = [leaf] * (size if size > 0 else 1)
    return leaf


def example_bodies(signature: Signature, rows: int = 2) -> dict[str, Any]:
    """The request bodies this signature takes: `instances` (rows) and `inputs` (columns), and whether CSV can
    reach it (a CSV row becomes a plain list: only a one-input signature takes one)."""
    row = example_instance(signature)
    columns = {key: [_example_value(spec)] * rows for key, spec in sorted(signature.inputs.items())}
    bodies: dict[str, Any] = {
        "instances": {"instances": [row] * rows},
        "inputs": {"inputs": columns if len(columns) > 1 else next(iter(columns.values()))},
    }
    if len(signature.inputs) == 1:
        spec = next(iter(signature.inputs.values()))
        if spec.shape is not None and len(spec.shape) <= 2:
            line = row if isinstance(row, list) else [row]
            bodies["csv"] = "\n".join([",".join(str(v) for v in line)] * rows)
    return bodies
