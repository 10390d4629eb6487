"""One host's process of a heterogeneous parameter-server job, for tests/test_entry_hetero.py.

Wired the way the bundled script is meant to use entrypoints/hetero_cluster.py: the cluster comes from
resourceconfig.json (under $SAGEMAKER_BASE_DIR) and $DFM_CLUSTER_ADDRESSES, never from TF_CONFIG.

    python hetero_task.py [--worker] [--ps-per-host N] [--rounds N] [--stop-file PATH]

On a ps host: serve its ps tasks until the chief is done. On a worker host: serve its worker task until
the chief is done (on the chief's host that needs --worker: the chief process itself coordinates). The
chief waits for every task, trains a sharded table in rounds, and on a dead ps prints one line naming it.
"""

import argparse
import os
import sys
import time

import hetero_cluster as hc

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def log(message):
    print(f"[hetero] {message}", flush=True)


def start_server(cluster, task):
    import tensorflow as tf

    return tf.distribute.Server(
        tf.train.ClusterSpec(cluster.cluster_spec()),
        job_name=task.job,
        task_index=task.index,
        protocol="grpc",
        start=True,
    )


def run_chief(cluster, rounds, stop_file):
    import tensorflow as tf

    hc.wait_for_tasks([t for t in cluster.tasks if t.job != "chief"], timeout=120)
    resolver = tf.distribute.cluster_resolver.SimpleClusterResolver(
        tf.train.ClusterSpec(cluster.cluster_spec()), task_type="chief", task_id=0, rpc_layer="grpc"
    )
    num_ps = len(cluster.job("ps"))
    strategy = tf.distribute.experimental.ParameterServerStrategy(
        resolver, variable_partitioner=tf.distribute.experimental.partitioners.FixedShardsPartitioner(num_ps)
    )
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        table = tf.Variable(tf.zeros([64, 4]), name="table")
    log("shards " + " ".join(shard.device for shard in table.variables))

    @tf.function
    def step():
        table.assign_add(tf.ones([64, 4]))

    done = 0
    try:
        while done < rounds and not (stop_file and os.path.exists(stop_file)):
            for _ in range(4):
                coordinator.schedule(step)
            coordinator.join()
            done += 1
            log(f"round {done} sum={sum(float(tf.reduce_sum(s)) for s in table.variables):.0f}")
            time.sleep(0.2)
    except Exception as err:  # noqa: BLE001  the point: name the ps behind a coordinator error
        message = hc.ps_failure_message(err, cluster)
        if message is None:
            raise
        print(f"[dfm] error: {message}", file=sys.stderr, flush=True)
        return 3
    return 0


def main(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--worker", action="store_true", help="the chief host's own worker task")
    parser.add_argument("--ps-per-host", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--stop-file", default="")
    args = parser.parse_args(argv)
    cluster = hc.build_cluster(
        hc.read_resource_config(), ps_group="ps", ps_per_host=args.ps_per_host, addresses=hc.addresses_from_env()
    )
    mine = cluster.local_tasks()
    if mine[0].job == "ps":
        return hc.serve_until_chief_done(
            cluster, lambda task: start_server(cluster, task), log=log, appear_timeout=120, poll=0.3
        )
    if mine[0].job == "chief" and not args.worker:
        return run_chief(cluster, args.rounds, args.stop_file)
    worker = [t for t in mine if t.job == "worker"][0]
    server = start_server(cluster, worker)
    log(f"{worker.describe()} serving {server.target}")
    seen = hc.wait_until_chief_done(cluster, appear_timeout=120, poll=0.3)
    return 0 if seen else 1


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
