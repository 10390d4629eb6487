"""`dfm serve --check`: the serving request of an artifact (its layout as the container finds it, each version's
signatures) and its document: what a request to this model must look like, with example bodies."""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from launcher.serving import contract, rest
from launcher.serving.artifact import Artifact, ServePlan, open_artifact
from launcher.serving.model import VersionInfo, describe


@dataclass(frozen=True)
class ServeRequest:
    """What the local server will serve: the plan, the artifact laid out, every version's signatures."""

    plan: ServePlan
    artifact: Artifact
    described: Mapping[str, Mapping[int, VersionInfo]]
    downloaded: Path | None = None  # the temporary folder a training job's model.tar.gz was downloaded into

    def close(self) -> None:
        self.artifact.close()
        if self.downloaded is not None:
            shutil.rmtree(self.downloaded, ignore_errors=True)


def build_request(plan: ServePlan, downloaded: Path | None = None) -> ServeRequest:
    artifact = open_artifact(plan.model)
    try:
        return ServeRequest(plan, artifact, describe(artifact), downloaded)
    except BaseException:
        artifact.close()
        raise


def document(request: ServeRequest) -> dict[str, Any]:
    """The artifact as the container serves it, and for each model's latest version the request it takes."""
    layout = request.artifact.layout
    models = {}
    for model in layout.models:
        latest = request.described[model.name][max(model.versions)]
        models[model.name] = {
            "folder": model.folder or ".",  # in the artifact
            "versions": list(model.versions),
            "signatures": {name: _signature_doc(sig) for name, sig in sorted(latest.signatures.items())},
            "example": _example(latest, handled=bool(layout.notes)),
        }
    host = f"http://{request.plan.host}:{request.plan.port}"
    default = layout.default.name
    return {
        "artifact": str(request.plan.model),
        "root": str(request.artifact.root) if request.artifact.unpacked is None else "(the archive's root)",
        "default_model": default,
        "notes": list(layout.notes),
        "models": models,
        "routes": [
            f"GET {host}/ping",
            f"POST {host}/invocations (application/json, application/jsonlines, text/csv)",
            f"POST {host}/v1/models/{default}[/versions/N]:predict",
            f"GET {host}/v1/models/{default}[/versions/N][/metadata]",
        ],
    }


def _signature_doc(signature: rest.Signature) -> dict[str, Any]:
    def tensors(specs):
        return {
            k: {"dtype": s.dtype, "shape": list(s.shape) if s.shape is not None else None} for k, s in specs.items()
        }

    return {"inputs": tensors(signature.inputs), "outputs": tensors(signature.outputs), "method": signature.method_name}


def _example(info: VersionInfo, handled: bool) -> dict[str, Any]:
    signature = info.signatures.get(contract.DEFAULT_SIGNATURE)
    if signature is None:
        return {"note": f"no {contract.DEFAULT_SIGNATURE} signature: every request must name one (signature_name)"}
    example = rest.example_bodies(signature)
    if "csv" not in example and not handled:
        example["csv"] = None
        example["csv_note"] = (
            f"text/csv rows reach TensorFlow Serving as plain lists, and {contract.DEFAULT_SIGNATURE} takes "
            f"{len(signature.inputs)} inputs by name ({', '.join(sorted(signature.inputs))}): send JSON, or add "
            "code/inference.py at the artifact's root to turn CSV into named instances"
        )
    return example


def text(doc: Mapping[str, Any]) -> str:
    """The document for a terminal."""
    lines = [f"artifact {doc['artifact']}: layout ok (default model {doc['default_model']!r})"]
    lines += [f"note: {note}" for note in doc["notes"]]
    for name, model in doc["models"].items():
        versions = ", ".join(str(v) for v in model["versions"])
        lines.append(f"model {name!r} in {model['folder']} of {doc['root']}: versions {versions}")
        for sig_name, sig in model["signatures"].items():
            lines.append(f"  signature {sig_name} ({sig['method']}):")
            for key, spec in sorted(sig["inputs"].items()):
                lines.append(f"    input  {key}: {spec['dtype']} {spec['shape']}")
            for key, spec in sorted(sig["outputs"].items()):
                lines.append(f"    output {key}: {spec['dtype']} {spec['shape']}")
        example = model["example"]
        if "instances" in example:
            lines.append("  an application/json body (rows):")
            lines.append("    " + json.dumps(example["instances"]))
            lines.append("  or (columns):")
            lines.append("    " + json.dumps(example["inputs"]))
            if example.get("csv"):
                lines.append("  or text/csv:")
                lines += ["    " + row for row in example["csv"].splitlines()]
            elif example.get("csv_note"):
                lines.append(f"  text/csv: {example['csv_note']}")
        else:
            lines.append(f"  {example['note']}")
    lines.append("routes: " + "; ".join(doc["routes"]))
    return "\n".join(lines)
