"""`dfm data prepare`'s Spark application (PySpark, Spark 3.5 API): click logs in, TFRecord files laid out for
one training job out, plus statistics.

Standalone on purpose: it is shipped as a SageMaker Processing job's `submit_app` (with `prepare_codec.py`, its
parsers, `prepare_encode.py`, its encoder, `prepare_app_stats.py` and `prepare_app_write.py`, its write side, in
--py-files) and runs in the Spark image (numpy; no TensorFlow, no protobuf, no `launcher`), and `dfm data prepare
--local` runs the very same files on local Spark. Its one argument is the location of a JSON job description
(written by `launcher/data/prepare_job.py`).

Stages: read -> parse (bad rows counted; libsvm statistics gathered) -> split eval -> balance (train negatives
kept with probability negative_rate) -> encode tf.train.Examples and frame them, a block of rows at a time -> the
shuffle's map side (one full shuffle of the framed records over the network), all in one pass whose tallies come
back first; `fail` stops there, before anything is written -> statistics (raw input: one aggregation) -> write
from the shuffle (a task per file, or several files a task on a cluster with far fewer cores than files) ->
prepare.json.
"""

import argparse
import itertools
import json
import os
import sys
import time

import numpy as np
import prepare_codec as codec
import prepare_app_stats as stats
import prepare_app_write as write

STAGE_PREFIX = "[dfm-prepare]"
BLOCK = 4096  # rows per block
SPLIT_SIZE = "mapreduce.input.fileinputformat.split.minsize"
GZIP_HINT = " (gzip-compressed data: Spark decompresses only files whose names end in .gz; rename them)"


def _lighten_worker():
    """A Spark Python worker pays ~60 ms of CPU a task whatever its rows: invalidate_caches() before it rereads every
    zip importer's directory (Spark's core jar on the path: 5,000 entries, no Python; one importer per package from
    pyspark.zip), gc.collect() after it walks every object loaded. Drop those importers (made again when needed)
    and freeze what is loaded now."""
    if "pyspark.worker" not in sys.modules:  # the driver
        return
    import gc

    sys.path[:] = [entry for entry in sys.path if not entry.endswith(".jar")]
    for entry in [entry for entry in sys.path_importer_cache if ".jar" in entry or ".zip" + os.sep in entry]:
        del sys.path_importer_cache[entry]
    gc.freeze()


_lighten_worker()


# ------------------------------------------------------------------------------------------------ stages
# The stage after each one ends (Spark is lazy: a stage is known when its action ends), for a watcher in the same
# process (`dfm data prepare --local` on a terminal): name -> what runs next.
NEXT_STAGE = {"read": "statistics, split, encode and write", "stats": "split, encode and write"}
WATCHERS = []  # callables told the next stage's name


class Progress:
    def __init__(self):
        self.started = self.last = time.time()
        self.seconds = {}

    def stage(self, name, detail=""):
        now = time.time()
        self.seconds[name] = round(now - self.last, 3)
        self.last = now
        print(f"{STAGE_PREFIX} {name} {self.seconds[name]:.1f}s{(': ' + detail) if detail else ''}", flush=True)
        for watcher in WATCHERS:
            watcher(NEXT_STAGE.get(name, "finishing"))


def split_files(lines):
    """(file, bytes) of each partition of sc.textFile's lines (one Hadoop split of one file each), asked of the JVM
    once."""
    hadoop = lines._jrdd.rdd().dependencies().head().rdd()  # the HadoopRDD under textFile's toString map
    splits = [split.inputSplit().value() for split in hadoop.partitions()]
    return [split.getPath().toString() for split in splits], [split.getLength() for split in splits]


def whole_files_fit(spark, files):
    """Whether libsvm input can be read as whole files' bytes: every file is one split (not larger than a task's
    share) and none is compressed (sc.textFile decompresses by the file's name)."""
    jvm = spark.sparkContext._jvm
    codecs = jvm.org.apache.hadoop.io.compress.CompressionCodecFactory(spark.sparkContext._jsc.hadoopConfiguration())
    return len(set(files)) == len(files) and all(
        codecs.getCodec(jvm.org.apache.hadoop.fs.Path(f)) is None for f in files
    )


def read_parsed(spark, uri, job):
    """The input parsed per partition. libsvm as whole files' bytes when they fit in a task (sc.binaryFiles: no
    line decoded to a Java string and encoded again, no line sent to Python on its own), else as sc.textFile's bare
    lines, each partition's file named once (not a Row and input_file_name() pickled per line); Parquet as Rows with
    their file."""
    from pyspark.sql import functions as F

    if job["input"]["format"] == "parquet":
        frame_ = spark.read.parquet(uri).withColumn("_file", F.input_file_name())
        return frame_.rdd.mapPartitions(lambda rows: parse_partition(((r["_file"], r.asDict()) for r in rows), job))
    context = spark.sparkContext
    hadoop = context._jsc.hadoopConfiguration()
    if int(hadoop.get(SPLIT_SIZE) or 0) <= 1:  # not configured: splits of Spark SQL's 128 MB, not each 32 MB block
        hadoop.set(SPLIT_SIZE, str(128 << 20))
    lines = context.textFile(uri)
    files, sizes = split_files(lines)
    # Many small files are a split each; a read task then takes several, as the DataFrame read packed them: 128 MB
    # a task, a task per core at least, and as many tasks on each core (the last core's extra task is the wall time)
    cores = context.defaultParallelism
    tasks = cores * -(-max(cores, -(-sum(sizes) // (128 << 20))) // cores)
    if job["input"]["format"] == "libsvm" and whole_files_fit(spark, files):
        # a split per file, files under spark.files.openCostInBytes (4 MB) packed together
        whole = context.binaryFiles(uri, minPartitions=1 << 30)
        whole = whole.coalesce(tasks) if whole.getNumPartitions() > tasks else whole
        return whole.mapPartitions(lambda pairs: whole_libsvm_partition(pairs, job))
    parsed = lines.mapPartitionsWithIndex(lambda i, rows: parse_partition(rows, job, files[i]))
    return parsed.coalesce(tasks) if len(files) > tasks else parsed


# A block: (labels float32[n], payload); payload (ids int64[n, F], values float32[n, F]) for libsvm input, else the
# list of parsed raw rows. Rows travel, are split, encoded and placed a block at a time, as arrays.
def make_block(parsed):
    return np.array([row[0] for row in parsed], np.float32), parsed


def take(block, mask):
    labels, payload = block
    if isinstance(payload, tuple):
        return labels[mask], (payload[0][mask], payload[1][mask])
    return labels[mask], [payload[i] for i in np.flatnonzero(mask)]


def block_rows(block):
    """The parsed raw rows again (for the statistics' DataFrame)."""
    return block[1]


def libsvm_blocks(chunks, job, origin):
    """One file's libsvm lines parsed a chunk at a time as arrays ((labels, ids, values, bad [(line, BadRow)])) ->
    ("bad", "file: reason: text") per bad row, ("ok", block) per BLOCK good rows."""
    fields = job["field_size"]
    held = [np.zeros(0, np.float32), np.zeros((0, fields), np.int32), np.zeros((0, fields), np.float32)]
    for labels, ids, values, bad in chunks:
        for line, err in bad:
            yield ("bad", f"{os.path.basename(origin)}: {err}: {line[:80]!r}")
        ids = ids.astype(np.int32) if not ids.size or ids.max() < 2**31 else ids  # half the bytes to hold and move
        held = [np.concatenate(pair) for pair in zip(held, (labels.astype(np.float32), ids, values.astype(np.float32)))]
        while len(held[0]) >= BLOCK:
            yield ("ok", (held[0][:BLOCK], (held[1][:BLOCK], held[2][:BLOCK])))
            held = [part[BLOCK:] for part in held]
    if len(held[0]):
        yield ("ok", (held[0], (held[1], held[2])))


def libsvm_partition(lines, job, origin):
    """libsvm lines (text) of one file, parsed BLOCK lines at a time."""
    while chunk := list(itertools.islice(lines, BLOCK)):
        labels, ids, values, bad = codec.parse_libsvm_lines(chunk, job["field_size"], job.get("feature_size"))
        yield labels, ids, values, [(chunk[index], err) for index, err in bad]


def whole_libsvm_partition(files, job):
    """(file, its bytes) pairs -> what parse_partition gives for their lines."""
    for origin, data in files:
        chunks = codec.line_chunks(data)
        parsed = (codec.parse_libsvm_bytes(chunk, job["field_size"], job.get("feature_size")) for chunk in chunks)
        yield from libsvm_blocks(parsed, job, origin)


def parse_partition(rows, job, origin=None):
    """rows: the lines of one file's split (origin: the file), or Parquet's (file, row dict) pairs.
    -> ("bad", "file: reason: text") per bad row, ("ok", block) per BLOCK good rows."""
    parquet = job["input"]["format"] == "parquet"
    if job["input"]["format"] == "libsvm":
        yield from libsvm_blocks(libsvm_partition(rows, job, origin), job, origin)
        return
    rows = rows if parquet else ((origin, row) for row in rows)
    good = []
    for origin, row in rows:
        if not parquet and not row.strip():
            continue
        try:
            parsed = codec.raw_row(row, job) if parquet else codec.parse_line(row, job)
        except codec.BadRow as err:
            shown = row if parquet else repr(row[:80])
            yield ("bad", f"{os.path.basename(origin)}: {err}: {shown}")
            continue
        if parsed is not None:
            good.append(parsed)
        if len(good) == BLOCK:
            yield ("ok", make_block(good))
            good = []
    if good:
        yield ("ok", make_block(good))


def _keys(rng, index, position, count, shuffle):
    """Order keys: seeded random, or without shuffle each input split's rows in order (dealt over the files)."""
    return rng.integers(0, 2**62, count) if shuffle else (index << 40) + position + np.arange(count)


def split_block(job, index, number, position, block, has_eval_input):
    """Block `number` of partition `index` (its first row the partition's `position`th good row), split seeded per
    partition and block: ("eval"|"train", rows, keys) items; train negatives kept with negative_rate."""
    fraction = 0.0 if has_eval_input else job.get("eval_fraction", 0.0)
    rate, count = job.get("negative_rate"), len(block[0])
    rng = np.random.default_rng([job["seed"], index, number])
    to_eval, keep = rng.random(count) < fraction, rng.random(count)
    keys = _keys(rng, index, position, count, job["shuffle"])
    train = ~to_eval if rate is None else ~to_eval & ((block[0] > 0.5) | (keep < rate))
    for part, mask in (("train", train), ("eval", to_eval)):
        if mask.any():
            yield part, take(block, mask), keys[mask]


def eval_block(job, index, number, position, block):
    """A block of a separate eval input with its order keys (seeded per partition and block, as above)."""
    rng = np.random.default_rng([job["seed"], index, number, 1])
    yield "eval", block, _keys(rng, index, position, len(block[0]), job["shuffle"])


def read_partition(index, items, job, keyed, source):
    """The read pass of one partition of input `source` ("train": the input, or "eval": a separate eval input): its
    good blocks as keyed(job, index, number, position, block) gives them for the write ((part, rows, keys) items)
    and, last, ("tally", source, (bad rows, good rows, statistics, first bad rows)). Only what will be written goes
    on: the negatives the balance drops are gone here."""
    tally = stats.Tally(job, index)
    number = position = 0
    for kind, value in items:
        if kind == "bad":
            tally.bad(value)
            continue
        tally.good(value)
        yield from keyed(job, index, number, position, value)
        number, position = number + 1, position + len(value[0])
    yield ("tally", source, tally.value())


# ------------------------------------------------------------------------------------------------ main
def check_read(part, uri, rows, bad_count, examples, policy):
    """What reading one input found: its first bad rows printed (the job's log, the terminal with --local); a stop
    (SystemExit, before anything is written) when no row is good, or any is bad under `bad_rows: fail`."""
    for example in examples:
        print(f"{STAGE_PREFIX} bad {part} row: {example}", flush=True)
    name = "" if part == "train" else f"{part} "
    hint = GZIP_HINT if any("\\x1f\\x8b" in e or "\\x1f\ufffd" in e for e in examples) else ""
    if not rows:
        found = f"first: {examples[0]}" if examples else "no lines"
        raise SystemExit(
            f"{STAGE_PREFIX} no good {name}rows in {uri} ({bad_count} bad; {found}){hint}; nothing written"
        )
    if bad_count and policy == "fail":
        raise SystemExit(
            f"{STAGE_PREFIX} {bad_count} bad {name}rows (bad_rows: fail); first: {examples[0]}{hint}; nothing written"
        )


def run(spark, job):
    """Spark is lazy: each stage line times the action that ran it (read: parse, statistics, split, balance, encode,
    shuffle; write: the shuffle read and the files)."""
    from pyspark import StorageLevel

    progress, context = Progress(), spark.sparkContext
    parsed = read_parsed(spark, job["input"]["uri"], job)
    raw_stats = job.get("stats", True) and job["input"]["format"] != "libsvm"
    if raw_stats:  # the statistics' DataFrame reads every good row again
        parsed = parsed.persist(StorageLevel.MEMORY_AND_DISK)
    has_eval_input = bool(job.get("eval_uri"))

    def split(*block):
        return split_block(*block, has_eval_input)

    items = parsed.mapPartitionsWithIndex(lambda i, rows: read_partition(i, rows, job, split, "train"))
    if has_eval_input:
        eval_job = {**job, "stats": False}
        eval_parsed = read_parsed(spark, job["eval_uri"], job)
        items = items.union(
            eval_parsed.mapPartitionsWithIndex(lambda i, rows: read_partition(i, rows, eval_job, eval_block, "eval"))
        )
    # train and eval files are written in one pass: one shuffle, one write stage; stats_only encodes nothing
    paths = {"train": job["train_paths"], **({"eval": job["eval_paths"]} if job["eval_paths"] else {})}
    layout, every_path = write.file_layout({} if job.get("stats_only") else paths)
    tasks = max(1, min(len(every_path), write.WRITE_TASKS_PER_CORE * context.defaultParallelism))
    shuffled = write.shuffled_parts(items, layout, tasks, job)
    tallies = write.read_tallies(context, shuffled, tasks)
    bad_count, rows, partial, examples = tallies.get("train", (0, 0, None, []))
    examples = [text for _, text in examples]
    report = {
        "input": job["input"]["uri"],
        "rows": rows,
        "bad_rows": bad_count,
        "bad_examples": examples,
        "bad_rows_policy": job["bad_rows"],
    }
    progress.stage("read", f"{rows} good rows, {bad_count} bad")
    check_read("train", job["input"]["uri"], rows, bad_count, examples, job["bad_rows"])
    if has_eval_input:
        eval_bad_count, eval_rows, _, eval_examples = tallies.get("eval", (0, 0, None, []))
        report["eval_bad_rows"] = eval_bad_count
        eval_examples = [text for _, text in eval_examples]
        check_read("eval", job["eval_uri"], eval_rows, eval_bad_count, eval_examples, job["bad_rows"])
    if job.get("stats", True):
        if raw_stats:
            good = parsed.filter(lambda item: item[0] == "ok").flatMap(lambda item: block_rows(item[1]))
            report["stats"] = stats.statistics(spark, good, job)
            parsed.unpersist()
        else:
            report["stats"] = stats.indexed_statistics(rows, partial, job["field_size"])
        progress.stage("stats", f"positive rate {report['stats']['positive_rate']:.4f}")
        _write_json(job["report_dir"], "stats.json", report["stats"])
    if job.get("stats_only"):
        report["seconds"] = progress.seconds
        _write_json(job["report_dir"], "prepare.json", report)
        return report
    report.update(write.write_parts(context, shuffled, layout, every_path, tasks))
    progress.stage(
        "write",
        f"{report['train']['rows']} train rows in {report['train']['files']} files"
        + (f", {report['eval']['rows']} eval rows in {report['eval']['files']}" if "eval" in report else "")
        + " (shuffle read, write)",
    )
    train_rows = report["train"]["rows"]
    report["negative_rate"] = job.get("negative_rate")
    report["train_negative_share"] = (train_rows - report["train"]["positives"]) / train_rows if train_rows else 0.0
    report["shuffle"], report["seed"] = job["shuffle"], job["seed"]
    report["seconds"] = progress.seconds
    _write_json(job["report_dir"], "prepare.json", report)
    return report


def _write_json(folder, name, value):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, name), "w", encoding="utf-8") as out:
        json.dump(value, out, indent=2)
        out.write("\n")


def read_job(spark, location):
    """The job description: a local path, or any URI Spark reads (s3:// on SageMaker)."""
    if os.path.exists(location):
        with open(location, encoding="utf-8") as handle:
            return json.load(handle)
    return json.loads(spark.read.text(location, wholetext=True).first()[0])


def main(argv=None):
    parser = argparse.ArgumentParser(prog="dfm-prepare")
    parser.add_argument("--job", required=True, help="the JSON job description (path or s3:// URI)")
    args = parser.parse_args(argv)
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.appName("dfm-prepare").getOrCreate()
    job = read_job(spark, args.job)
    report = run(spark, job)
    print(f"{STAGE_PREFIX} done: {json.dumps({k: report[k] for k in ('rows', 'bad_rows') if k in report})}", flush=True)
    spark.stop()


if __name__ == "__main__":
    sys.exit(main())
