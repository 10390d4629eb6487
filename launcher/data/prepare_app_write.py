"""The write side of `dfm data prepare`'s Spark application (prepare_app.py): each block of kept rows encoded,
framed and placed in its file, the shuffle to the write tasks (the read pass's tallies to a partition of their own),
and the files written under a scratch name and renamed into place. Shipped and imported beside prepare_app by its own
name, as prepare_codec, prepare_encode and prepare_app_stats are.
"""

import itertools
import os

import numpy as np
import prepare_encode as encode
import prepare_app_stats as stats

WRITE_TASKS_PER_CORE = 4
TALLY = -1  # the shuffle key of the read pass's tallies (no file's)


def place_partition(items, layout, job):
    """(part, block, keys) -> (file, (keys, framed lengths, framed bytes, positives)) per file the block's rows go to:
    encoded and framed as arrays; layout[part] = (first file, files), the file is first + key % files. A tally
    goes on as (TALLY, (source, tally)); a part not in the layout (nothing written) is dropped."""
    crc32c = encode.crc32c_function()
    for item in items:
        if item[0] == "tally":
            yield TALLY, item[1:]
            continue
        part, block, keys = item
        if part not in layout:
            continue
        first_file, files = layout[part]
        labels, payload = block
        if isinstance(payload, tuple):
            data, lengths = encode.encode_libsvm(labels, *payload)
        else:
            data, lengths = encode.encode_records([encode.encode_raw(row, job["features"]) for row in payload])
        data, lengths = encode.frame(data, lengths, crc32c)
        target = first_file + keys % files
        order = np.argsort(target, kind="stable")
        data, lengths = encode.gather(data, lengths, order)
        target, keys, labels = target[order], keys[order], labels[order]
        bounds = np.cumsum(lengths)
        for file in np.unique(target).tolist():
            first, last = np.searchsorted(target, [file, file + 1])
            start = int(bounds[first - 1]) if first else 0
            yield (
                file,
                (
                    keys[first:last],
                    lengths[first:last],
                    data[start : int(bounds[last - 1])].tobytes(),
                    int((labels[first:last] > 0.5).sum()),
                ),
            )


def scratch_folder(path):
    """Where a file is written before it is renamed into place: `.partial` beside its channel folder."""
    return os.path.join(os.path.dirname(os.path.abspath(os.path.dirname(path) or ".")), ".partial")


def write_partition(index, chunks, paths):
    """Write one file's records, sorted by key, under a temporary name outside the channel folder (a ProcessingOutput
    would upload a partial file), renamed when complete; -> (index, count, positives). The scratch folder is
    removed by the driver once every task is done: a task removing it could pull it from under another's open."""
    chunks = list(chunks)
    keys = np.concatenate([c[1][0] for c in chunks]) if chunks else np.zeros(0, np.int64)
    lengths = np.concatenate([c[1][1] for c in chunks]) if chunks else np.zeros(0, np.int64)
    data = np.frombuffer(b"".join(c[1][2] for c in chunks), np.uint8)
    data, _ = encode.gather(data, lengths, np.argsort(keys, kind="stable"))
    path = paths[index]
    folder, scratch = os.path.dirname(path) or ".", scratch_folder(path)
    os.makedirs(folder, exist_ok=True)
    os.makedirs(scratch, exist_ok=True)
    partial = os.path.join(scratch, f"{os.path.basename(folder)}-{os.path.basename(path)}.{os.getpid()}")
    with open(partial, "wb") as out:
        out.write(data.tobytes())
    os.replace(partial, path)
    yield index, len(keys), sum(c[1][3] for c in chunks)


def write_files(task, chunks, paths, tasks):
    """Write task `task`'s files (task, task + tasks, ...) one after the other, each even when no row went to it:
    its chunks arrive sorted by file."""
    pending = list(range(task, len(paths), tasks))
    for file, group in itertools.groupby(chunks, key=lambda chunk: chunk[0]):
        while pending[0] < file:
            yield from write_partition(pending.pop(0), iter(()), paths)
        yield from write_partition(pending.pop(0), group, paths)
    for file in pending:
        yield from write_partition(file, iter(()), paths)


def file_layout(paths):
    """{part: its files' paths} -> ({part: (first file, files)}, every file's path)."""
    layout, every_path = {}, []
    for part, part_paths in paths.items():
        layout[part] = (len(every_path), len(part_paths))
        every_path += part_paths
    return layout, every_path


def shuffled_parts(items, layout, tasks, job):
    """items: (part, block, keys) and tallies -> encoded, framed and shuffled to the write tasks: a file's chunks to
    task file % tasks, sorted by file; the tallies to one more partition, `tasks`. Computing any of its partitions
    runs the whole read pass and writes the shuffle once; the read's check and the write both use it."""
    placed = items.mapPartitions(lambda part: place_partition(part, layout, job))
    return placed.repartitionAndSortWithinPartitions(tasks + 1, lambda file: tasks if file == TALLY else file % tasks)


def read_tallies(context, shuffled, tasks):
    """The read pass's tallies, merged per input: {source: (bad rows, good rows, statistics' partial, first bad)}."""

    def merge(chunks):
        merged = {}
        for _, (source, tally) in chunks:
            merged[source] = stats.merge_tallies(merged[source], tally) if source in merged else tally
        yield merged

    return context.runJob(shuffled, merge, [tasks])[0]


def write_parts(context, shuffled, layout, every_path, tasks):
    """Write every file from the shuffle -> {part: report}. A part's file is key % files, records sorted by key
    within a file; one write stage for all parts: a task per file, or, when the files outnumber the cluster's task
    slots by more than WRITE_TASKS_PER_CORE, that many tasks per slot, each writing its files in turn (a task's
    fixed cost, ~50 ms of CPU, paid fewer times)."""
    writing = shuffled.mapPartitionsWithIndex(lambda task, chunks: write_files(task, chunks, every_path, tasks))
    written = context.runJob(writing, lambda rows: rows, list(range(tasks)))
    for scratch in {scratch_folder(path) for path in every_path}:  # this host's; on other hosts it stays, empty
        try:
            os.rmdir(scratch)
        except OSError:  # not here, or not empty
            pass
    counts, positives = [0] * len(every_path), [0] * len(every_path)
    for index, count, plus in written:
        counts[index], positives[index] = count, plus
    reports = {}
    for part, (first, files) in layout.items():
        mine = counts[first : first + files]
        reports[part] = {
            "files": files,
            "rows": sum(mine),
            "positives": sum(positives[first : first + files]),
            "per_file": mine,
        }
    return reports
