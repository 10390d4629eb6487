"""Reading and writing the variables of the model and its training state, under any strategy.

Every update inside a step writes through the variable's handle: under a mirrored strategy that is
the copy of the replica running the step, so each replica applies the same all-reduced update to its
own copy and the copies stay identical without a merge_call (tf.Variable.assign on a mirrored
variable in a replica would demand an aggregation mode); everywhere else it is the variable.
"""

import tensorflow as tf


def flat_variables(variables):
    """Expand ShardedVariables (PS partitioning) into their shards; gradients are per shard."""
    flat = []
    for var in variables:
        shards = getattr(var, "variables", None)
        flat.extend(shards if isinstance(shards, (list, tuple)) else [var])
    return flat


def set_untracked(module, name, variables):
    """module.name = list(variables), not saved with `module`'s checkpoints. A tf.Module saves the variables its
    attributes hold; a partitioned table's shards are already saved once, as slices of the model's table, and a
    second list of them would make every checkpoint (and a resume's reads) hold each table twice."""
    module.__dict__[name] = list(variables)


def partitioned(model):
    """Whether the model's tables are partitioned (ShardedVariables across ps tasks)."""
    return any(len(flat_variables([var])) > 1 for var in model.sparse_variables)


def full_value(var):
    """The whole value of a variable, concatenating the shards of a ShardedVariable."""
    shards = flat_variables([var])
    return shards[0].read_value() if len(shards) == 1 else tf.concat([s.read_value() for s in shards], 0)


def assign(var, value):
    tf.raw_ops.AssignVariableOp(resource=var.handle, value=tf.cast(value, var.dtype))


def assign_add(var, value):
    tf.raw_ops.AssignAddVariableOp(resource=var.handle, value=tf.cast(value, var.dtype))


def assign_sub(var, value):
    tf.raw_ops.AssignSubVariableOp(resource=var.handle, value=tf.cast(value, var.dtype))


def scatter_sub(var, indices, rows):
    tf.raw_ops.ResourceScatterSub(resource=var.handle, indices=indices, updates=rows)


def scatter_update(var, indices, rows):
    tf.raw_ops.ResourceScatterUpdate(resource=var.handle, indices=indices, updates=rows)
