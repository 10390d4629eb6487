"""The shard table of the bundled scripts: which part of its input one worker reads. Pure Python (no
TensorFlow), so the launcher loads this very module (launcher/facts/contract.py) to lay prepared files out for it."""


def shard_for(num_hosts, host_index, workers_per_host, local_rank, multi_path, s3_shard):
    """The shard table: which part of its input one worker reads, as (num_shards, index).

    multi_path: each local worker has its own channel(s) (`train`, `train-1`, ...), so the channel
    already separates the workers of one host. s3_shard: S3 already split the objects across hosts.
    """
    if not 0 <= host_index < num_hosts or not 0 <= local_rank < workers_per_host:
        raise ValueError(f"host {host_index}/{num_hosts} or rank {local_rank}/{workers_per_host} out of range")
    if multi_path and s3_shard:
        return 1, 0
    if multi_path:
        return num_hosts, host_index
    if s3_shard:
        return workers_per_host, local_rank
    return num_hosts * workers_per_host, host_index * workers_per_host + local_rank
