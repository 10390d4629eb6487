"""TensorBoard scalars of a run: the values of the chief's metric lines (train and eval loss and AUC,
examples/s) and the learning rate, written as event files under `--tensorboard_dir` (dfm passes
/opt/ml/output/tensorboard, the folder SageMaker syncs to TensorBoardOutputConfig's S3 path while the job
runs; `--local` maps it into the master host's tree). Empty: no summaries.

One writer per process, created at its first value: only the process that prints the metric lines (rank
0, the parameter-server chief) records any, so no other process opens a writer. Tags are SageMaker's
metric names with `/` for `:` (`train/auc`, `eval/loss`, ...). TensorFlow is imported at the first value;
the tensorboard package is not needed.
"""

_state = {"dir": "", "writer": None, "learning_rate": None}


def configure(tensorboard_dir):
    """Where this process's summaries go ("" = none); set once, before training."""
    _state["dir"], _state["writer"] = tensorboard_dir or "", None


def follow_learning_rate(variable):
    """The optimizer's learning-rate variable (already scaled for the workers), recorded with every train value."""
    _state["learning_rate"] = variable


def record(kind, step, **values):
    """Scalars `<kind>/<name>` at `step`, flushed at once (SageMaker uploads what is on disk)."""
    if not _state["dir"]:
        return
    import tensorflow as tf

    if _state["writer"] is None:
        with tf.device("/cpu:0"):
            _state["writer"] = tf.summary.create_file_writer(_state["dir"])
    if kind == "train" and _state["learning_rate"] is not None:
        values["learning_rate"] = float(_state["learning_rate"].numpy())
    with tf.device("/cpu:0"), _state["writer"].as_default(step=int(step)):
        for name, value in values.items():
            tf.summary.write(f"{kind}/{name}", tf.constant(float(value), tf.float32), metadata=_scalar_metadata(tf))
    _state["writer"].flush()


def _scalar_metadata(tf):
    """What `tf.summary.scalar` writes, without it: that function lives in the tensorboard package, which an
    image may lack (TensorBoard reads a float32 tensor tagged for its `scalars` plugin, content version 0 = empty)."""
    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = "scalars"
    return metadata
