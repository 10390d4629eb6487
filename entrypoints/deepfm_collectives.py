"""How the workers of a synchronous run talk, as one small interface over three implementations:
one process alone, Horovod, and MultiWorkerMirroredStrategy (whose workers may hold several local
replicas). A collectives object has:

- `rank`, `size` (workers), `replicas` (model copies in sync: the learning-rate scale)
- `average_gradients(grads)`: inside the traced train step; IndexedSlices stay sparse (gathered)
- `all_have(flag) -> bool`: True when every worker has `flag` (one small collective per step)
- `all_have_tensor(flag) -> bool tensor`: the same inside a traced step, with no host round trip
- `sum(tensor) -> tensor`: elementwise sum over workers
- `broadcast(variables)`: rank 0's values everywhere
- optionally `local_copies(var)`: every copy a worker holds of a variable (several local replicas)

TensorFlow and Horovod are imported by the objects that use them, not by this module.
"""


def sparse_as_dense(grads):
    """IndexedSlices -> dense tensors: the embedding gradients are then all-reduced (NCCL on GPUs, one
    table-sized exchange) instead of all-gathered (rows and ids of every replica, through the host under
    Horovod). The `sparse_allreduce: dense` choice."""
    import tensorflow as tf

    return [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]


def communication_implementation(num_gpus):
    """MultiWorkerMirrored's collective implementation: NCCL across GPUs, ring (gRPC) on CPUs. Left to
    AUTO, TensorFlow 2 resolves it to ring even on GPUs."""
    return "NCCL" if num_gpus else "RING"


def communication_options(tf, num_gpus):
    name = communication_implementation(num_gpus)
    implementation = getattr(tf.distribute.experimental.CommunicationImplementation, name)
    return tf.distribute.experimental.CommunicationOptions(implementation=implementation)


class SingleProcess:
    """One process training alone: rank 0 of 1, sums and averages are the identity, broadcast a no-op."""

    rank, size, replicas = 0, 1, 1

    def average_gradients(self, grads):
        return grads

    def all_have(self, flag):
        return bool(flag)

    def all_have_tensor(self, flag):
        return flag

    def sum(self, tensor):
        return tensor

    def broadcast(self, variables):
        pass


class HorovodCollectives:
    """Horovod's: one worker per process; IndexedSlices gradients are all-gathered (they stay sparse)."""

    def __init__(self, hvd):
        import tensorflow as tf

        self.hvd, self.tf = hvd, tf
        self.rank, self.size = hvd.rank(), hvd.size()
        self.replicas = self.size

    def average_gradients(self, grads):
        hvd = self.hvd
        return [None if g is None else hvd.allreduce(g, op=hvd.Average, name=f"grad_{i}") for i, g in enumerate(grads)]

    def all_have(self, flag):
        have = self.hvd.allreduce(
            self.tf.constant([1 if flag else 0], self.tf.int32), op=self.hvd.Min, name="all_have_batch"
        )
        return int(have.numpy()[0]) == 1

    def all_have_tensor(self, flag):
        tf = self.tf
        have = self.hvd.allreduce(tf.reshape(tf.cast(flag, tf.int32), [1]), op=self.hvd.Min, name="all_have_batch")
        return tf.equal(have[0], 1)

    def sum(self, tensor):
        return self.hvd.allreduce(tensor, op=self.hvd.Sum, name="metrics_sum").numpy()

    def broadcast(self, variables):
        """In place (Horovod >= 0.24, every SageMaker image that ships it): each rank receives straight into
        its variables, instead of a received copy of the whole state alongside them before the assigns."""
        self.hvd.broadcast_variables(variables, root_rank=0, inplace=True)


class MirroredCollectives:
    """Collectives over the strategy's workers; each worker may hold several local replicas."""

    def __init__(self, strategy, rank):
        import tensorflow as tf

        self.tf, self.strategy = tf, strategy
        self.local_replicas = len(strategy.extended.worker_devices)
        self.replicas = strategy.num_replicas_in_sync
        self.rank, self.size = rank, self.replicas // self.local_replicas
        self._sum = tf.function(lambda t: strategy.run(self._worker_sum, args=(t,)))

    def local_index(self):
        """This replica's index among its worker's replicas (a worker's replicas are numbered
        consecutively in the sync group); inside strategy.run only."""
        return self.tf.distribute.get_replica_context().replica_id_in_sync_group % self.local_replicas

    def _worker_sum(self, tensor):
        tf = self.tf
        # identity() places the value on this replica's device; an argument has none to reduce to.
        local = tf.identity(tensor)
        if self.local_replicas > 1:  # one contribution per worker, not one per local replica
            local = tf.where(self.local_index() == 0, local, tf.zeros_like(local))
        return tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.SUM, local)

    def average_gradients(self, grads):
        present = [g for g in grads if g is not None]
        averaged = iter(self.tf.distribute.get_replica_context().all_reduce(self.tf.distribute.ReduceOp.MEAN, present))
        return [None if g is None else next(averaged) for g in grads]

    def local_copies(self, variable):
        return list(self.strategy.experimental_local_results(variable))

    def _local(self, value):
        return self.strategy.experimental_local_results(value)[0]

    def all_have(self, flag):
        total = self._local(self._sum(self.tf.constant([1.0 if flag else 0.0])))
        return int(round(float(total.numpy()[0]))) == self.size

    def all_have_tensor(self, flag):
        tf = self.tf
        total = self._local(self._sum(tf.reshape(tf.cast(flag, tf.float32), [1])))
        return tf.equal(tf.round(total[0]), float(self.size))

    def sum(self, tensor):
        return self._local(self._sum(tensor)).numpy()

    def broadcast(self, variables):
        """No broadcast in the strategy's API: sum rank 0's values with everyone else's zeros (exact in
        each variable's own dtype: x + 0 = x), then assign outside any replica, which sets every local
        copy. Small variables travel packed by dtype, each large one alone, so the peak stays near one
        copy of the largest variable (not a float64 copy of the whole state on every device)."""
        for group in broadcast_groups(variables, PACK_ELEMENTS):
            self._broadcast_group(group)

    def _broadcast_group(self, group):
        tf = self.tf
        packed = group[0].read_value() if len(group) == 1 else tf.concat([tf.reshape(v, [-1]) for v in group], 0)
        if self.rank != 0:
            packed = tf.zeros_like(packed)
        total = self._local(self._sum(packed))
        if len(group) == 1:
            group[0].assign(total)
            return
        for var, part in zip(group, tf.split(total, [int(tf.size(v)) for v in group])):
            var.assign(tf.reshape(part, var.shape))


PACK_ELEMENTS = 1 << 20  # variables up to this size are packed (one collective per dtype, few traces)


def broadcast_groups(variables, pack_elements):
    """Variables -> the groups broadcast together: each variable above pack_elements alone, the others
    packed by dtype in groups of at most pack_elements. Pure: works on anything with .dtype and .shape."""
    groups, packs = [], {}
    for var in variables:
        size = var.shape.num_elements()
        if size > pack_elements:
            groups.append([var])
            continue
        pack = packs.setdefault(var.dtype, [[], 0])
        if pack[1] + size > pack_elements and pack[0]:
            groups.append(pack[0])
            pack[0], pack[1] = [], 0
        pack[0].append(var)
        pack[1] += size
    groups += [pack for pack, _ in packs.values() if pack]
    return groups
