"""Restoring a checkpoint into a trainer whose tables are partitioned, one table shard at a time.

tf.train.Checkpoint.restore reads every variable a ps task holds in one RestoreV2 before it assigns any, so a ps
holds its share twice at that moment (the values it was initialized with, and the checkpoint's): 2.1x its share
at its peak, measured (docs/big-tables.md). Here the tables' shards and their optimizer slots (the model's and the
baseline's) are read and assigned one at a time, where each lives (or on `io_device`, where the chief writes the
checkpoints), so a ps holds its share and one shard more; the other variables are restored by tf.train.Checkpoint
through views of the objects that leave the shards out.
"""

import tensorflow as tf

from deepfm_variables import assign, flat_variables

VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
TABLES = ("first_order", "embeddings")  # the model's partitioned tables (DeepFM's attributes)


def _partitioned(owner, names):
    return [name for name in names if len(flat_variables([getattr(owner, name)])) > 1]


def shard_pieces(objects, trainer):
    """[(shard or slot variable, checkpoint key, first row, or None for a whole key)] of the partitioned tables in
    `objects` (the CheckpointKeeper's: model, optimizer, baseline): each table's shards as row ranges of the
    table's key, and each shard's slots under its optimizer's `slots/<flat index>`."""
    tables = [("model", trainer.model, n, "optimizer", trainer.optimizer, trainer.variables) for n in TABLES]
    baseline = objects.get("baseline")
    if baseline is not None:
        tables.append(("baseline", baseline, "weights", "baseline/optimizer", baseline.optimizer, baseline.params))
    pieces = []
    for prefix, owner, name, optimizer_path, optimizer, params in tables:
        if not _partitioned(owner, [name]):
            continue
        index = {id(var): i for i, var in enumerate(params)}
        first = 0
        for shard in flat_variables([getattr(owner, name)]):
            pieces.append((shard, f"{prefix}/{name}{VALUE}", first))
            at = index[id(shard)]
            pieces += [
                (slot, f"{optimizer_path}/slots/{at}/{kind}{VALUE}", None) for kind, slot in optimizer.slots[at].items()
            ]
            first += int(shard.shape[0])
    return pieces


def _view(module, leave_out, **extra):
    """A tf.Module tracking `module`'s trackable attributes but those in `leave_out`, and `extra`: restored through
    a tf.train.Checkpoint, it matches the same checkpoint keys as `module` does, less the ones left out."""
    view = tf.Module(name=f"{module.name}_view")
    for name, value in vars(module).items():
        if not name.startswith("_") and name not in leave_out and isinstance(value, tf.__internal__.tracking.Trackable):
            setattr(view, name, value)
    for name, value in extra.items():
        setattr(view, name, value)
    return view


def _optimizer_view(optimizer, params, partitioned_ids):
    """The optimizer without the slots of the partitioned shards: its other slots keyed by their list index (a
    checkpoint's list children are named by index, so a dict keyed so matches them)."""
    slots = {str(i): optimizer.slots[i] for i, var in enumerate(params) if id(var) not in partitioned_ids}
    return _view(optimizer, {"slots"}, slots=slots)


def restore(objects, trainer, path, options, io_device=None):
    """Restore `objects` (the CheckpointKeeper's) from the checkpoint `path`, the partitioned tables' shards and
    their slots one at a time; raises what tf.train.Checkpoint.restore raises when the rest does not fit."""
    pieces = shard_pieces(objects, trainer)
    if not pieces:
        tf.train.Checkpoint(**objects).restore(path, options=options).assert_existing_objects_matched()
        return
    shards = {id(var) for var, _, first in pieces if first is not None}
    views = dict(objects)
    model = trainer.model
    views["model"] = _view(model, set(_partitioned(model, TABLES)))
    views["optimizer"] = _optimizer_view(trainer.optimizer, trainer.variables, shards)
    baseline = objects.get("baseline")
    if baseline is not None:
        own = _optimizer_view(baseline.optimizer, baseline.params, shards)
        views["baseline"] = _view(baseline, {"optimizer", *_partitioned(baseline, ["weights"])}, optimizer=own)
    tf.train.Checkpoint(**views).restore(path, options=options).assert_existing_objects_matched()
    shapes = dict(tf.train.list_variables(path))
    for var, key, first in pieces:
        _restore_piece(path, var, key, shapes[key], first, io_device)


def _restore_piece(path, var, key, saved_shape, first, io_device):
    """Read `var`'s rows of `key` (from `first`; all of it when None) where `var` lives, and assign them there."""
    if first is None:
        spec = ""
    else:
        rows = int(var.shape[0])
        spec = " ".join(map(str, saved_shape)) + f" {first},{rows}" + ":-" * (len(saved_shape) - 1)
    with tf.device(io_device or var.device):
        (value,) = tf.raw_ops.RestoreV2(prefix=path, tensor_names=[key], shape_and_slices=[spec], dtypes=[var.dtype])
    with tf.device(var.device):
        assign(var, value)
