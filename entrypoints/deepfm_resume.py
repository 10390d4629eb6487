"""What a run may start from: a checkpoint that fits this run (the same optimizer, every variable in the same
shape, a loss scale when this run keeps one), read before it is restored; and whether the restored state is
the end of a finished run.

A run that completed (final checkpoint, evaluation and export) leaves FINISHED in the checkpoint folder, naming
its last step and its job. A later job that restores that very step and trains no step on has nothing to do:
it stops instead of exporting the old model again. The same job run again (a spot restart keeps the job name;
dfm's recovery names its attempts `<first>-r<N>`) is a restart and completes as usual, and so does a run that
restored the final checkpoint before FINISHED was written (interrupted between the checkpoint and the export).

TensorFlow is imported inside the functions that use it.
"""

import json
import os
import re

FINISHED = "dfm-finished.json"
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
LOSS_SCALE = "loss_scale/scale" + VALUE
# the slots deepfm_training.SparseOptimizer keeps per variable, by optimizer
SLOTS = {"adam": ("m", "v"), "adagrad": ("accum",), "ftrl": ("accum", "linear"), "sgd": ()}
_SLOT_KEY = re.compile(r"^optimizer/slots/\d+/([^/]+)/")
_ATTEMPT = re.compile(r"-r\d+$")


def optimizer_of(slot_names):
    """-> the optimizer whose slots are `slot_names`, else a description of them."""
    found = tuple(sorted(slot_names))
    names = [kind for kind, slots in SLOTS.items() if tuple(sorted(slots)) == found]
    return names[0] if names else f"slots {', '.join(found)}"


def _slots_words(kind):
    return f"slots: {', '.join(SLOTS[kind])}" if SLOTS.get(kind) else "no slots"


def mismatch(saved, expected, kind):
    """What keeps a checkpoint from this run, or None. `saved`: {key: shape} of the checkpoint
    (tf.train.list_variables); `expected`: {key: shape} of this run's variables; `kind`: this run's optimizer."""
    saved_slots = {m.group(1) for m in map(_SLOT_KEY.match, saved) if m}
    if saved_slots != set(SLOTS[kind]):
        written = optimizer_of(saved_slots)
        words = f" ({_slots_words(written)})" if written in SLOTS else f" ({written})"
        return f"was written with optimizer {written}{words}, this run uses {kind} ({_slots_words(kind)})"
    for key, shape in sorted(expected.items(), key=lambda item: -len(item[1])):  # tables and kernels first
        name = key[: -len(VALUE)] if key.endswith(VALUE) else key
        if key in saved and list(saved[key]) != list(shape):
            return f"holds {name} in shape {list(saved[key])}, this run's is {list(shape)}"
    if LOSS_SCALE in expected and LOSS_SCALE not in saved:
        return "has no loss scale (float32 compute), this run computes in float16 (mixed_precision)"
    return None


def expected_shapes(model, optimizer, loss_scale=None):
    """{checkpoint key: shape} of the variables a CheckpointKeeper saves: the model's, the optimizer's slots and
    the loss scale's. A key the checkpoint does not hold is not compared (a checkpoint an earlier version wrote
    holds some of the model's variables under `optimizer/_variables/N` instead)."""
    import tensorflow as tf

    def is_variable(value):
        return isinstance(value, tf.Variable) or type(value).__name__ == "ShardedVariable"

    shapes = {}
    for path, var in model._flatten(predicate=is_variable, with_path=True):
        shapes["/".join(["model", *map(str, path)]) + VALUE] = var.shape.as_list()
    for index, slots in enumerate(optimizer.slots):
        for name, var in slots.items():
            shapes[f"optimizer/slots/{index}/{name}{VALUE}"] = var.shape.as_list()
    if loss_scale is not None:
        shapes[LOSS_SCALE] = []
    return shapes


def same_job(one, other):
    """Whether two job names are one job: the same name, or attempts of one job (`<first>-r<N>`, the first
    cut so that the whole fits 63 characters)."""
    if one == other:
        return True
    first_one, first_other = _ATTEMPT.sub("", one), _ATTEMPT.sub("", other)
    if first_one == one and first_other == other:
        return False  # neither is an attempt of the other
    return bool(first_one and first_other) and (first_one.startswith(first_other) or first_other.startswith(first_one))


def mark_finished(directory, step, job):
    """Record, after the export, that the run `job` ended at `step` (written whole, then renamed)."""
    import tensorflow as tf

    path = os.path.join(directory, FINISHED)
    tf.io.gfile.makedirs(directory)
    with tf.io.gfile.GFile(path + ".tmp", "w") as out:
        out.write(json.dumps({"step": int(step), "job": job}) + "\n")
    tf.io.gfile.rename(path + ".tmp", path, overwrite=True)


def finished_by(directory, step):
    """-> the job that finished at `step` in `directory` (FINISHED), or None."""
    import tensorflow as tf

    path = os.path.join(directory, FINISHED)
    if not tf.io.gfile.exists(path):
        return None
    try:
        with tf.io.gfile.GFile(path) as held:
            record = json.loads(held.read())
        return record["job"] if int(record["step"]) == int(step) else None
    except (ValueError, KeyError, TypeError):
        return None  # unreadable: not a finished run's record
