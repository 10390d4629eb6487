"""A warm start's source for `dfm launch --local`: a local run's folder (its checkpoint store, else its exported
model), a checkpoint folder, a model.tar.gz or a SavedModel folder, found on disk and laid out as the channel every
simulated host links (the source itself is never written)."""

from __future__ import annotations

import json
from pathlib import Path

from launcher.errors import DfmError
from launcher.plans import warm_start as warm
from launcher.plans.training_plan import Plan, with_warm_start

RUN_PLAN = "plan.json"  # a local run folder's stored plan (local_request.PLAN_FILE)
MASTER = "algo-1"  # the host whose model folder holds the run's export


def is_checkpoint(folder: Path) -> bool:
    return (folder / "checkpoint").is_file() or any(folder.glob("*.index"))


def is_saved_model(folder: Path) -> bool:
    """A SavedModel, or a model folder of numbered versions holding one (as /opt/ml/model is exported)."""
    return (folder / "saved_model.pb").is_file() or any(folder.glob("*/saved_model.pb"))


def run_source(run: Path, store_of) -> tuple[str, Path] | None:
    """(kind, path) of a local run's folder: its checkpoint store when it holds a checkpoint, else its export."""
    try:
        ran = Plan.from_dict(json.loads((run / RUN_PLAN).read_text()))
    except ValueError as err:  # JSON or the plan's fields
        raise DfmError(f"warm_start.from: {run / RUN_PLAN}: {err}", 2) from None
    store = store_of(ran, run.parent)
    if store is not None and store.is_dir() and is_checkpoint(store):
        return warm.CHECKPOINT, store
    model = run / "hosts" / MASTER / "model"
    if model.is_dir() and is_saved_model(model):
        return warm.MODEL, model
    return None


def find(path: Path, store_of) -> tuple[str, Path]:
    """(kind, path) of a local source; DfmError (exit 2) naming what it is not. `store_of(plan, run_dir)`: where a
    run keeps its checkpoint store (local_request.checkpoint_store)."""
    if not path.exists():
        raise DfmError(
            f"warm_start.from: {path} does not exist (--local takes a run folder, a checkpoint folder, a "
            "model.tar.gz or a SavedModel folder)",
            2,
        )
    if path.is_file():
        if path.name.endswith(".tar.gz"):
            return warm.MODEL, path
    elif (path / RUN_PLAN).is_file():
        found = run_source(path, store_of)
        if found is not None:
            return found
    elif is_checkpoint(path):
        return warm.CHECKPOINT, path
    elif is_saved_model(path):
        return warm.MODEL, path
    raise DfmError(
        f"warm_start.from: {path} holds no checkpoint (checkpoint, *.index) and no model (model.tar.gz, "
        "saved_model.pb): give a run folder that checkpointed or exported, or the folder itself",
        2,
    )


def resolve(plan: Plan, store_of, store: Path | None) -> Plan:
    """`plan` with its local warm start found and its channel pointed at it; refuses (exit 2) a source that is this
    run's own checkpoint store, which the run would write into."""
    start = plan.warm_start
    if start is None:
        return plan
    if start.source.startswith("s3://") and start.resolved:
        return plan  # an S3 source: its channel needs a local folder like any other (local: channels:)
    kind, path = find(Path(start.local_path or start.source).expanduser().resolve(), store_of)
    if store is not None and (path == store.resolve() or store.resolve() in path.parents):
        raise DfmError(
            f"warm_start.from: {path} is this run's own checkpoint store: the run would restore it and then write "
            "over it; give checkpoints its own prefix (auto)",
            2,
        )
    return with_warm_start(plan, kind, str(path), local_path=str(path))
