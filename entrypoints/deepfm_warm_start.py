"""Warm start: a fresh run (no checkpoint of its own yet) begins from an earlier run's state, arriving as the input
channel `warmstart` (a checkpoint folder the bundled scripts wrote, any distribution and ps count) or `model` (the
SDK's model channel: a `model.tar.gz` holding `<version>/saved_model.pb` and its variables).

`warm_start`: "" (off), `all` (every weight, and from a checkpoint the optimizer's slots), `embeddings` (the two
feature_size tables, and from a checkpoint their slots). `warm_start_steps`: `restart` (step 0, the learning-rate
schedule from its start) or `continue` (the source's step).

Every tensor is read by name from the source (tf.train.load_checkpoint) and assigned to this run's variables row
range by row range, shard by shard: a table partitioned over any number of ps tasks takes its rows from a source
of any other count, and only the rows a shard of this run takes are read (a slice of the source's table: no process
reads a whole partitioned table). A table that grew (`feature_size`: a new day's ids) keeps the source's rows as they
were and its new rows as a fresh model draws them; any other shape that differs stops the run before training.

TensorFlow is imported inside the functions that use it: `check_source_or_exit` runs before TensorFlow starts.
"""

import os
import re
import tarfile
import tempfile

from deepfm_log import log

CHANNELS = ("warmstart", "model")  # a checkpoint folder; the SDK's model channel
VALUE = "/.ATTRIBUTES/VARIABLE_VALUE"
TABLES = ("first_order", "embeddings")
_VERSION = re.compile(r"^\d+$")


class WarmStartError(Exception):
    """A source this run cannot start from; the message ends the run in one line."""


def setting(hp, name, default):
    return getattr(hp, name, default)


def channel_dir(env, name):
    """The folder of channel `name`: SM_CHANNEL_<NAME>, else $SAGEMAKER_BASE_DIR/input/data/<name>."""
    return os.environ.get(f"SM_CHANNEL_{name.upper()}") or os.path.join(env.data_dir, name)


def source_channel(env):
    """-> (channel, folder) of the warm-start source given to this run, or None."""
    for name in CHANNELS:
        folder = channel_dir(env, name)
        if name in env.channels or os.path.isdir(folder):
            return name, folder
    return None


def source_name(hp, folder):
    return setting(hp, "warm_start_source", "") or folder


def source_problem(hp, env):
    """-> why the warm-start source cannot be read (before TensorFlow starts), or None."""
    if not setting(hp, "warm_start", ""):
        return None
    found = source_channel(env)
    if found is None:
        return (
            f"warm_start is {setting(hp, 'warm_start', '')} but this job has no '{CHANNELS[0]}' or "
            f"'{CHANNELS[1]}' channel: give it the source (dfm launch --warm-start-from JOB_OR_URI)"
        )
    channel, folder = found
    name = source_name(hp, folder)
    if not os.path.isdir(folder):
        return f"warm start source {name} does not exist (channel '{channel}' has no folder {folder})"
    if not os.listdir(folder):
        return f"warm start source {name} is empty (channel '{channel}', {folder})"
    if channel == "warmstart" and not os.path.exists(os.path.join(folder, "checkpoint")):
        return (
            f"warm start source {name} is not a dfm checkpoint folder: no 'checkpoint' file in {folder} "
            "(give the checkpoint prefix of a bundled script's run, or its model.tar.gz)"
        )
    if channel == "model" and not (_model_archive(folder) or _saved_model_dir(folder)):
        return f"warm start source {name} is not a dfm model: no model.tar.gz or <version>/saved_model.pb in {folder}"
    return None


def check_source_or_exit(hp, env):
    """Exit 1 with one line when warm start is on and its source cannot be read (the script's first line)."""
    problem = source_problem(hp, env)
    if problem:
        log(f"error: {problem}; no model exported")
        raise SystemExit(1)


def _model_archive(folder):
    path = os.path.join(folder, "model.tar.gz")
    return path if os.path.isfile(path) else None


def _saved_model_dir(folder):
    """-> the newest `<digits>/` folder under `folder` holding saved_model.pb, or None."""
    versions = [
        name
        for name in os.listdir(folder)
        if _VERSION.match(name) and os.path.isfile(os.path.join(folder, name, "saved_model.pb"))
    ]
    return os.path.join(folder, max(versions, key=int)) if versions else None


def unpack_model(archive, scratch):
    """model.tar.gz -> the SavedModel folder unpacked under `scratch` (the archive is only read)."""
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if _is_safe(m)]
        safe = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}  # Python >= 3.10.12 / 3.11.4 / 3.12
        tar.extractall(scratch, members=members, **safe)  # noqa: S202  members checked: no absolute path, no ..
    found = _saved_model_dir(scratch)
    if found is None:
        raise WarmStartError(f"{os.path.basename(archive)} holds no <version>/saved_model.pb: not a dfm model")
    return found


def _is_safe(member):
    parts = member.name.split("/")
    return (member.isfile() or member.isdir()) and not member.name.startswith("/") and ".." not in parts


# ---- the source's variables, by role ----


def roles_of(model):
    """[(role, variable)] of the model in the optimizer's flat order: the two tables, then its dense variables; the
    batch norm's moving statistics last (no optimizer slots). A role is the variable's attribute path."""
    roles = [("first_order", model.first_order), ("embeddings", model.embeddings), ("bias", model.bias)]
    roles += [(f"kernels/{i}", k) for i, k in enumerate(model.kernels)]
    roles += [(f"biases/{i}", b) for i, b in enumerate(model.biases)]
    for i, params in enumerate(model.bn_params):
        roles += [(f"bn_params/{i}/gamma", params["gamma"]), (f"bn_params/{i}/beta", params["beta"])]
    for i, params in enumerate(model.bn_params):
        roles += [(f"bn_params/{i}/mean", params["mean"]), (f"bn_params/{i}/var", params["var"])]
    return roles


class Source:
    """A checkpoint's or a SavedModel's variables by role: `shape(role)`, and `pieces(role, slot=None)`:
    [(key, first row, rows)] whose rows, in order, make the whole tensor (a partitioned table's shards)."""

    def __init__(self, prefix, words, from_checkpoint):
        import tensorflow as tf

        self.prefix, self.words, self.from_checkpoint = prefix, words, from_checkpoint
        self.reader = tf.train.load_checkpoint(prefix)
        self.shapes = {k: list(s) for k, s in self.reader.get_variable_to_shape_map().items()}
        self.dtypes = self.reader.get_variable_to_dtype_map()
        table = next((k for k in sorted(self.shapes, key=len) if k.endswith("/first_order" + VALUE)), None)
        if table is None or table.replace("first_order", "embeddings") not in self.shapes:
            raise WarmStartError(f"{words} holds no first_order and embeddings tables: not a dfm checkpoint or model")
        self.root = table[: -len("first_order" + VALUE)]
        self.flat = self._flat_layout() if from_checkpoint else {}

    def key(self, role):
        return f"{self.root}{role}{VALUE}"

    def shape(self, role):
        key = self.key(role)
        if key in self.shapes:
            return self.shapes[key]
        flat = self.flat.get(role)
        if flat and len(flat) == 1:
            return self.shapes.get(f"optimizer/_variables/{flat[0][0]}{VALUE}")
        return None

    def _flat_layout(self):
        """{role: [(flat index, first row, rows)]}: where the source optimizer's flat variables (a partitioned
        table's shards, one index each) sit: the shards of first_order, then of embeddings, their rows adding up to
        the table's; then bias, kernels, biases, batch norm's gamma and beta. A whole table has no key of its own
        under the optimizer when it has no slots (sgd): its index then holds the table."""
        kernels = sum(1 for k in self.shapes if re.match(rf"^{self.root}kernels/\d+{re.escape(VALUE)}$", k))
        norms = sum(1 for k in self.shapes if re.match(rf"^{self.root}bn_params/\d+/mean{re.escape(VALUE)}$", k))
        dense = ["bias"] + [f"kernels/{i}" for i in range(kernels)] + [f"biases/{i}" for i in range(kernels)]
        dense += [f"bn_params/{i}/{p}" for i in range(norms) for p in ("gamma", "beta")]
        rows, layout, index = self.shapes[self.key("first_order")][0], {}, 0
        for table in TABLES:
            pieces, first = [], 0
            while first < rows:
                shape = self._flat_shape(index) or (self.shapes[self.key(table)] if first == 0 else None)
                if not shape or shape[0] <= 0 or shape[1:] != self.shapes[self.key(table)][1:]:
                    raise WarmStartError(f"{self.words}: the shard {index} of {table} is missing: not a dfm checkpoint")
                pieces.append((index, first, shape[0]))
                first, index = first + shape[0], index + 1
            layout[table] = pieces
        layout.update({role: [(index + i, 0, None)] for i, role in enumerate(dense)})
        return layout

    def _flat_shape(self, index):
        for key, shape in self.shapes.items():
            if key.startswith((f"optimizer/_variables/{index}/", f"optimizer/slots/{index}/")):
                return shape
        return None

    def slot_names(self):
        return {m.group(1) for m in map(re.compile(r"^optimizer/slots/\d+/([^/]+)/").match, self.shapes) if m}

    def pieces(self, role, slot=None):
        """[(key, first row, rows)] of `role` (or of its optimizer slot `slot`), or None when the source lacks it."""
        flat = self.flat.get(role)
        if slot is not None:
            if not flat:
                return None
            keys = [(f"optimizer/slots/{i}/{slot}{VALUE}", first, rows) for i, first, rows in flat]
            return keys if all(k in self.shapes for k, _, _ in keys) else None
        if self.key(role) in self.shapes:
            return [(self.key(role), 0, self.shapes[self.key(role)][0] if self.shapes[self.key(role)] else None)]
        if flat:
            key = f"optimizer/_variables/{flat[0][0]}{VALUE}"
            return [(key, 0, (self.shapes.get(key) or [None])[0])] if key in self.shapes else None
        return None

    def rows(self, pieces, first, count):
        """Rows first..first+count of the tensor `pieces` make, reading only those rows of the pieces they overlap."""
        import numpy as np

        parts = []
        for key, start, rows in pieces:
            rows = self.shapes[key][0] if rows is None else rows
            low, high = max(first, start), min(first + count, start + rows)
            if low < high:
                parts.append(self.row_range(key, low - start, high - start))
        return np.concatenate(parts, 0) if len(parts) > 1 else parts[0]

    def row_range(self, key, low, high):
        """Rows low..high of the tensor `key`, read as a slice (RestoreV2 with a slice spec). TensorFlow reads each
        stored slice that overlaps the range whole before cutting it: a table saved by a partitioned variable's
        shards costs only the shards it overlaps, a table saved whole costs the whole table on every call."""
        import tensorflow as tf

        shape = self.shapes[key]
        spec = " ".join(map(str, shape)) + f" {low},{high - low}" + ":-" * (len(shape) - 1)
        (rows,) = tf.raw_ops.RestoreV2(
            prefix=self.prefix, tensor_names=[key], shape_and_slices=[spec], dtypes=[self.dtypes[key]]
        )
        return rows.numpy()

    def value(self, key):
        """The tensor `key`, whole (a scalar or a dense layer's)."""
        return self.reader.get_tensor(key)


def open_source(hp, env, scratch):
    """-> Source of this run's warm-start channel (a model.tar.gz unpacked under `scratch`)."""
    import tensorflow as tf

    channel, folder = source_channel(env)
    if channel == "warmstart":
        prefix = tf.train.latest_checkpoint(folder)
        if prefix is None:
            raise WarmStartError(f"no checkpoint listed in {os.path.join(folder, 'checkpoint')} exists")
        return Source(prefix, f"checkpoint {os.path.basename(prefix)}", True)
    archive = _model_archive(folder)
    saved = unpack_model(archive, scratch) if archive else _saved_model_dir(folder)
    prefix = os.path.join(saved, "variables", "variables")
    if not tf.io.gfile.exists(prefix + ".index"):
        raise WarmStartError(f"model version {os.path.basename(saved)} has no variables: not a dfm model")
    return Source(prefix, f"model version {os.path.basename(saved)}", False)


# ---- restoring ----


def shards_of(var):
    """[(shard variable, first row)] of a variable (a ShardedVariable's shards, else itself)."""
    from deepfm_variables import flat_variables

    shards, first, out = flat_variables([var]), 0, []
    for shard in shards:
        out.append((shard, first))
        first += int(shard.shape[0]) if shard.shape.rank else 1
    return out


def plan(source, trainer, what):
    """-> [(role, target variable, source pieces, slot name or None)] to copy; raises WarmStartError naming the first
    variable whose shape cannot map (a table may have grown: its source rows are copied, the rest stays fresh)."""
    model, optimizer = trainer.model, trainer.optimizer
    roles = roles_of(model)
    chosen = [(r, v) for r, v in roles if r in TABLES] if what == "embeddings" else roles
    kinds = source.slot_names() if source.from_checkpoint else None
    if kinds is not None:
        from deepfm_resume import SLOTS, mismatch

        if kinds != set(SLOTS[optimizer.kind]):
            written = {f"optimizer/slots/0/{k}{VALUE}": [] for k in kinds}
            raise WarmStartError(f"{source.words} {mismatch(written, {}, optimizer.kind)}")
    flat_index = {id(shard): i for i, shard in enumerate(trainer.variables)}
    copies = []
    for role, var in chosen:
        shape, want = source.shape(role), var.shape.as_list()
        name = f"{source.root}{role}" if source.key(role) in source.shapes else f"model/{role}"
        if shape is None:
            raise WarmStartError(f"{source.words} has no {name}, this run's is {want}")
        grows = role in TABLES and shape[1:] == want[1:] and shape[0] <= want[0]
        if shape != want and not grows:
            raise WarmStartError(f"{source.words} holds {name} in shape {shape}, this run's is {want}")
        copies.append((role, var, source.pieces(role), None))
        if kinds:
            for slot in sorted(kinds):
                pieces = source.pieces(role, slot)
                if pieces is None:
                    continue  # the moving statistics have no slots
                slots = [optimizer.slots[flat_index[id(shard)]][slot] for shard, _ in shards_of(var)]
                copies.append((role, slots, pieces, slot))
    return copies


def assign_rows(source, targets, pieces, source_rows):
    """Copy the source tensor `pieces` into `targets` (one variable, or a list of per-shard slots of a partitioned
    one), shard by shard, only the rows the source has."""
    import tensorflow as tf

    if not isinstance(targets, list):
        targets = [shard for shard, _ in shards_of(targets)]
    first = 0
    for shard in targets:
        shape = shard.shape.as_list()
        if not shape:
            shard.assign(tf.cast(source.value(pieces[0][0]), shard.dtype))
            continue
        count = min(shape[0], max(source_rows - first, 0))
        if count == shape[0]:
            shard.assign(source.rows(pieces, first, count))
        elif count > 0:  # the source ends inside this shard: its new rows stay as they were drawn
            kept = shard.read_value()[count:]
            shard.assign(tf.concat([source.rows(pieces, first, count), kept], 0))
        first += shape[0]


def restore(hp, env, trainer):
    """Warm-start `trainer` from the source channel when warm_start is on. -> the log line's words, or None."""
    what = setting(hp, "warm_start", "")
    if not what:
        return None
    check_source_or_exit(hp, env)
    steps = setting(hp, "warm_start_steps", "restart")
    channel, folder = source_channel(env)
    name = source_name(hp, folder)
    with tempfile.TemporaryDirectory(prefix="dfm-warm-start-", dir=_scratch_parent(env)) as scratch:
        try:
            source = open_source(hp, env, scratch)
            copies = plan(source, trainer, what)
        except WarmStartError as err:
            log(
                f"error: warm start from {name}: {err}; train with the source's settings, or warm_start: embeddings "
                "when only the layers differ; no model exported"
            )
            raise SystemExit(1) from None
        for role, target, pieces, slot in copies:
            rows = source.shape(role)
            assign_rows(source, target, pieces, rows[0] if rows else 1)
        iterations = "optimizer/iterations" + VALUE
        step = int(source.value(iterations)) if steps == "continue" and iterations in source.shapes else 0
        trainer.optimizer.iterations.assign(step)
        trainer.progress.assign([0, step])
        restored = sum(len(shards_of(t)) if slot is None else len(t) for _, t, _, slot in copies)
        kind = ("weights" if what == "all" else "embedding tables") + (
            " and their optimizer slots" if any(slot for *_, slot in copies) else ""
        )
        line = f"warm start: restored {restored} variables ({kind}) from {name} ({source.words}), steps {steps}"
    log(line)
    return line


def _scratch_parent(env):
    parent = os.path.join(env.base_dir, "warm-start")
    try:
        os.makedirs(parent, exist_ok=True)
        return parent
    except OSError:
        return None
