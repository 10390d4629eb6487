"""`dfm data prepare`'s Spark application (PySpark, Spark 3.5 API): click logs in, TFRecord files laid out for
one training job out, plus statistics.

Standalone on purpose: it is shipped as a SageMaker Processing job's `submit_app` and runs in the Spark image
(no TensorFlow, no protobuf, no `launcher`), and `dfm data prepare --local` runs the very same file on local
Spark. Its one argument is the location of a JSON job description (written by `launcher/data/prepare_job.py`).

Stages: read -> parse (bad rows counted; `fail` stops before anything is written) -> statistics -> split eval
-> balance (train negatives kept with probability negative_rate) -> encode tf.train.Examples -> shuffle into
the planned files (one full shuffle of the encoded records over the network) -> write -> prepare.json.
"""

import argparse
import json
import math
import os
import random
import struct
import sys
import time

STAGE_PREFIX = "[dfm-prepare]"
MASK_DELTA = 0xA282EAD8
QUANTILES = [k / 16 for k in range(1, 16)]  # bucketize boundaries proposed from these
FLOAT32_LIMIT = 2.0**128 - 2.0**103  # the records hold float32: from here on a value rounds to inf


# ------------------------------------------------------------------------------------------ TFRecord framing
SHIPPED_WHEEL = "google_crc32c-cext"  # a google-crc32c wheel for the image's Python, renamed .zip for --py-files


def _unpack_shipped_wheel():
    """A wheel on sys.path (shipped with --py-files) cannot load its C extension from inside the zip: unpack it
    once per machine and put the folder first, so google-crc32c finds its C extension."""
    for entry in list(sys.path):
        name = os.path.basename(entry)
        if not (name.startswith(SHIPPED_WHEEL) and name.endswith(".zip") and os.path.isfile(entry)):
            continue
        import tempfile
        import zipfile

        target = os.path.join(tempfile.gettempdir(), f"dfm-{name[:-4]}")
        if not os.path.isdir(target):
            partial = f"{target}.{os.getpid()}"
            with zipfile.ZipFile(entry) as archive:
                archive.extractall(partial)
            try:
                os.rename(partial, target)
            except OSError:  # another task on this machine unpacked it first
                pass
        if target not in sys.path:
            sys.path.insert(0, target)


def _crc32c():
    """A kept CRC32C implementation: google-crc32c (its C extension, else its pure-Python fallback), else crc32c."""
    _unpack_shipped_wheel()
    try:
        import google_crc32c

        return google_crc32c.value
    except ImportError:
        import crc32c

        return crc32c.crc32c


def masked_crc(crc):
    return (((crc >> 15) | (crc << 17)) + MASK_DELTA) & 0xFFFFFFFF


def frame(record, crc32c):
    """One TFRecord: uint64 length, uint32 masked crc32c(length), data, uint32 masked crc32c(data)."""
    length = struct.pack("<Q", len(record))
    return b"".join((length, struct.pack("<I", masked_crc(crc32c(length))), record,
                     struct.pack("<I", masked_crc(crc32c(record)))))


# ------------------------------------------------------------------------------- tf.train.Example, by hand
# Example{1: Features{1: map<string, Feature>}}; Feature{1: BytesList, 2: FloatList, 3: Int64List}; each list's
# values are field 1 (packed for floats and ints). Length-delimited fields only: tag = field << 3 | 2.
def _varint(value):
    value &= 0xFFFFFFFFFFFFFFFF  # negative int64s are ten bytes, as protobuf writes them
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number, payload):
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def float_feature(values):
    return _field(2, _field(1, struct.pack(f"<{len(values)}f", *values)))


def int64_feature(values):
    return _field(3, _field(1, b"".join(_varint(v) for v in values)))


def bytes_feature(values):
    return _field(1, b"".join(_field(1, v) for v in values))


def example(features):
    """features: [(name, encoded Feature)] -> a serialized tf.train.Example."""
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, feature)) for name, feature in features)
    return _field(1, entries)


# ---------------------------------------------------------------------------------------------- parsing
class BadRow(ValueError):
    pass


def parse_libsvm(text, field_size, feature_size):
    """`label id:value ...` with exactly field_size pairs -> (label, ids, values); BadRow otherwise."""
    tokens = text.split()
    if len(tokens) - 1 != field_size:
        raise BadRow(f"{len(tokens) - 1} id:value pairs, expected {field_size}")
    try:
        label = float(tokens[0])
    except ValueError:
        raise BadRow(f"label {tokens[0]!r} is not a number") from None
    if not 0.0 <= label <= 1.0:
        raise BadRow(f"label {tokens[0]} is outside [0, 1]")
    ids, values = [], []
    for position, pair in enumerate(tokens[1:], start=1):
        id_text, sep, value_text = pair.partition(":")
        try:
            if not sep:
                raise ValueError
            feature_id, value = int(id_text), float(value_text)
        except ValueError:
            raise BadRow(f"pair {position} {pair!r} is not id:value") from None
        if feature_id < 0 or (feature_size and feature_id >= feature_size):
            raise BadRow(f"pair {position}: id {feature_id} is outside [0, {feature_size or 'inf'})")
        if not math.isfinite(value):
            raise BadRow(f"pair {position}: value {value_text} is not finite")
        if abs(value) >= FLOAT32_LIMIT:
            raise BadRow(f"pair {position}: value {value_text} is beyond float32 (inf in the records)")
        ids.append(feature_id)
        values.append(value)
    return label, ids, values


def _number(text, name):
    if text is None or text == "":
        return None
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise BadRow(f"{name}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise BadRow(f"{name}: {text!r} is not finite")
    if abs(value) >= FLOAT32_LIMIT:
        raise BadRow(f"{name}: {text!r} is beyond float32 (inf in the records)")
    return value


def raw_row(cells, job):
    """A mapping column -> value (text or Parquet) -> (label, numeric, categorical, multi-hot token lists)."""
    features = job["features"]
    label = _number(cells.get(features["label"]), features["label"])
    if label is None or not 0.0 <= label <= 1.0:
        raise BadRow(f"{features['label']}: {cells.get(features['label'])!r} is not a label in [0, 1]")
    numeric = [_number(cells.get(name), name) for name in features["numeric"]]
    categorical = []
    for name in features["categorical"]:
        value = cells.get(name)
        categorical.append(None if value is None or value == "" else str(value))
    bags = []
    for name, separator in features["multi_hot"].items():
        value = cells.get(name)
        if value is None:
            bags.append([])
        elif isinstance(value, (list, tuple)):
            bags.append([str(token) for token in value if token is not None and str(token) != ""])
        else:
            bags.append([token for token in str(value).split(separator) if token])
    return label, numeric, categorical, bags


def parse_line(text, job):
    fmt = job["input"]["format"]
    if fmt == "libsvm":
        return parse_libsvm(text, job["field_size"], job.get("feature_size"))
    columns = job["input"]["columns"]
    cells = text.rstrip("\r\n").split("\t" if fmt == "tsv" else ",")
    if len(cells) != len(columns):
        raise BadRow(f"{len(cells)} fields, expected {len(columns)}")
    if job["input"].get("header") and cells == columns:
        return None  # a file's header line
    return raw_row(dict(zip(columns, cells)), job)


def encode(parsed, job):
    """A parsed row -> the serialized tf.train.Example the bundled scripts read."""
    if job["input"]["format"] == "libsvm":
        label, ids, values = parsed
        return example([("label", float_feature([label])), ("ids", int64_feature(ids)),
                        ("values", float_feature(values))])
    label, numeric, categorical, bags = parsed
    features = job["features"]
    parts = [(features["label"], float_feature([label]))]
    parts += [(name, float_feature([v])) for name, v in zip(features["numeric"], numeric) if v is not None]
    parts += [(name, bytes_feature([v.encode()])) for name, v in zip(features["categorical"], categorical)
              if v is not None]
    parts += [(name, bytes_feature([t.encode() for t in bag])) for name, bag in zip(features["multi_hot"], bags)]
    return example(parts)


# ------------------------------------------------------------------------------------------------ stages
class Progress:
    def __init__(self):
        self.started = self.last = time.time()
        self.seconds = {}

    def stage(self, name, detail=""):
        now = time.time()
        self.seconds[name] = round(now - self.last, 3)
        self.last = now
        print(f"{STAGE_PREFIX} {name} {self.seconds[name]:.1f}s{(': ' + detail) if detail else ''}", flush=True)


def read_rows(spark, uri, job):
    """(origin, row) pairs: text lines (with their file) or Parquet rows as dicts."""
    from pyspark.sql import functions as F

    if job["input"]["format"] == "parquet":
        frame_ = spark.read.parquet(uri).withColumn("_file", F.input_file_name())
        return frame_.rdd.map(lambda row: (row["_file"], row.asDict()))
    lines = spark.read.text(uri).withColumn("_file", F.input_file_name())
    return lines.rdd.map(lambda row: (row["_file"], row["value"]))


def parse_partition(rows, job):
    """-> ("ok", parsed) or ("bad", "file: reason: text")."""
    parquet = job["input"]["format"] == "parquet"
    for origin, row in rows:
        if not parquet and not row.strip():
            continue
        try:
            parsed = raw_row(row, job) if parquet else parse_line(row, job)
        except BadRow as err:
            shown = row if parquet else repr(row[:80])
            yield ("bad", f"{os.path.basename(origin)}: {err}: {shown}")
            continue
        if parsed is not None:
            yield ("ok", parsed)


def split_partition(index, rows, job, has_eval_input):
    """Seeded per partition: ("eval"|"train", parsed, order key); train negatives kept with negative_rate."""
    rng = random.Random(job["seed"] * 1_000_003 + index)
    fraction = 0.0 if has_eval_input else job.get("eval_fraction", 0.0)
    rate = job.get("negative_rate")
    for position, parsed in enumerate(rows):
        to_eval = rng.random() < fraction
        keep = rng.random()
        # Without shuffle, each input split's rows keep their order (dealt round-robin over the files).
        key = rng.getrandbits(62) if job["shuffle"] else (index << 40) | position
        if to_eval:
            yield ("eval", parsed, key)
        elif rate is None or parsed[0] > 0.5 or keep < rate:
            yield ("train", parsed, key)


def keyed_partition(index, rows, job):
    """A separate eval input's rows with their order keys (seeded per partition, as split_partition does)."""
    rng = random.Random(job["seed"] * 1_000_003 + index + 500_009)
    for position, parsed in enumerate(rows):
        yield parsed, rng.getrandbits(62) if job["shuffle"] else (index << 40) | position


def write_partition(index, records, paths):
    """Write this partition's records (already in file order) to paths[index]; -> (index, count, positives)."""
    crc32c = _crc32c()
    path = paths[index]
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    count = positives = 0
    with open(path, "wb") as out:
        for _key, (label, record) in records:
            out.write(frame(record, crc32c))
            count += 1
            positives += label > 0.5
    yield index, count, positives


def write_part(rows, paths, job):
    """rows: (parsed, key) -> len(paths) files, file = key % files, records sorted by key within a file."""
    files = len(paths)
    keyed = rows.map(lambda item: (item[1], (item[0][0], encode(item[0], job))))
    placed = keyed.repartitionAndSortWithinPartitions(files, partitionFunc=lambda key: key % files)
    written = placed.mapPartitionsWithIndex(lambda i, records: write_partition(i, records, paths)).collect()
    counts = [0] * files
    positives = 0
    for index, count, plus in written:
        counts[index] = count
        positives += plus
    return {"files": len(paths), "rows": sum(counts), "positives": positives, "per_file": counts}


# ------------------------------------------------------------------------------------------------ stats
def statistics(spark, good, job):
    """Per column over every good row: approx distinct, missing share, quantiles, multi-hot lengths; the
    positive rate. One aggregation pass over a DataFrame of the parsed rows."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    if job["input"]["format"] == "libsvm":
        field_size = job["field_size"]
        schema = T.StructType([T.StructField("label", T.DoubleType())]
                              + [T.StructField(f"f{k}", T.LongType()) for k in range(field_size)])
        rows = good.map(lambda p: (float(p[0]), *[int(i) for i in p[1]]))
        frame_ = spark.createDataFrame(rows, schema)
        aggs = [F.count(F.lit(1)).alias("rows"), F.avg("label").alias("positive_rate")]
        for k in range(field_size):
            aggs += [F.approx_count_distinct(f"f{k}").alias(f"d{k}"), F.max(f"f{k}").alias(f"m{k}")]
        result = frame_.agg(*aggs).first().asDict()
        columns = {f"field{k}": {"kind": "indexed", "distinct": int(result[f"d{k}"] or 0),
                                 "max_id": int(result[f"m{k}"] if result[f"m{k}"] is not None else -1)}
                   for k in range(field_size)}
        return {"rows": int(result["rows"]), "positive_rate": float(result["positive_rate"] or 0.0),
                "columns": columns, "feature_size": 1 + max([c["max_id"] for c in columns.values()] + [-1])}
    features = job["features"]
    numeric, categorical, bags = features["numeric"], features["categorical"], list(features["multi_hot"])
    schema = T.StructType([T.StructField("label", T.DoubleType())]
                          + [T.StructField(f"n{k}", T.DoubleType()) for k in range(len(numeric))]
                          + [T.StructField(f"c{k}", T.StringType()) for k in range(len(categorical))]
                          + [T.StructField(f"m{k}", T.ArrayType(T.StringType())) for k in range(len(bags))])
    frame_ = spark.createDataFrame(good.map(lambda p: (p[0], *p[1], *p[2], *p[3])), schema)
    aggs = [F.count(F.lit(1)).alias("rows"), F.avg("label").alias("positive_rate")]
    for k in range(len(numeric)):
        column = F.col(f"n{k}")
        aggs += [F.avg(column.isNull().cast("double")).alias(f"n{k}_missing"), F.min(column).alias(f"n{k}_min"),
                 F.max(column).alias(f"n{k}_max"), F.approx_count_distinct(column).alias(f"n{k}_distinct"),
                 F.percentile_approx(column, QUANTILES, 10000).alias(f"n{k}_q")]
    for k in range(len(categorical)):
        column = F.col(f"c{k}")
        aggs += [F.avg(column.isNull().cast("double")).alias(f"c{k}_missing"),
                 F.approx_count_distinct(column).alias(f"c{k}_distinct")]
    for k in range(len(bags)):
        length = F.size(F.col(f"m{k}"))
        aggs += [F.avg((length == 0).cast("double")).alias(f"m{k}_missing"), F.max(length).alias(f"m{k}_longest"),
                 F.percentile_approx(length, [0.99], 10000).alias(f"m{k}_p99")]
    result = frame_.agg(*aggs).first().asDict()
    columns = {}
    for k, name in enumerate(numeric):
        columns[name] = {"kind": "numeric", "missing": round(result[f"n{k}_missing"] or 0.0, 6),
                         "min": result[f"n{k}_min"], "max": result[f"n{k}_max"],
                         "distinct": int(result[f"n{k}_distinct"] or 0), "quantiles": result[f"n{k}_q"] or []}
    for k, name in enumerate(categorical):
        columns[name] = {"kind": "categorical", "missing": round(result[f"c{k}_missing"] or 0.0, 6),
                         "distinct": int(result[f"c{k}_distinct"] or 0)}
    if bags:  # distinct tokens need the bags exploded: a second, narrow pass
        for k, name in enumerate(bags):
            tokens = frame_.select(F.explode(f"m{k}").alias("t")).agg(F.approx_count_distinct("t")).first()[0]
            columns[name] = {"kind": "multi_hot", "separator": features["multi_hot"][name],
                             "missing": round(result[f"m{k}_missing"] or 0.0, 6), "distinct": int(tokens or 0),
                             "longest": int(result[f"m{k}_longest"] or 0),
                             "max_length": max(1, int((result[f"m{k}_p99"] or [1])[0]))}
    return {"rows": int(result["rows"]), "positive_rate": float(result["positive_rate"] or 0.0), "columns": columns}


# ------------------------------------------------------------------------------------------------ main
def run(spark, job):
    """Spark is lazy: each stage line times the action that ran it (train: split, balance, encode, shuffle, write)."""
    from pyspark import StorageLevel

    spill = StorageLevel.MEMORY_AND_DISK  # at scale the parsed rows do not fit in memory
    progress = Progress()
    parsed = read_rows(spark, job["input"]["uri"], job).mapPartitions(lambda rows: parse_partition(rows, job))
    parsed = parsed.persist(spill)
    bad = parsed.filter(lambda item: item[0] == "bad")
    bad_count = bad.count()
    total = parsed.count()
    examples = bad.map(lambda item: item[1]).take(5) if bad_count else []
    report = {"input": job["input"]["uri"], "rows": total - bad_count, "bad_rows": bad_count,
              "bad_examples": examples, "bad_rows_policy": job["bad_rows"]}
    progress.stage("read", f"{total - bad_count} good rows, {bad_count} bad")
    if bad_count and job["bad_rows"] == "fail":
        raise SystemExit(f"{STAGE_PREFIX} {bad_count} bad rows (bad_rows: fail); first: {examples[0]}; nothing written")
    good = parsed.filter(lambda item: item[0] == "ok").map(lambda item: item[1])
    eval_good = None
    if job.get("eval_uri"):
        eval_parsed = read_rows(spark, job["eval_uri"], job).mapPartitions(lambda rows: parse_partition(rows, job))
        eval_parsed = eval_parsed.persist(spill)
        eval_bad = eval_parsed.filter(lambda item: item[0] == "bad")
        report["eval_bad_rows"] = eval_bad.count()
        if report["eval_bad_rows"] and job["bad_rows"] == "fail":
            first = eval_bad.map(lambda item: item[1]).first()
            raise SystemExit(f"{STAGE_PREFIX} {report['eval_bad_rows']} bad eval rows (bad_rows: fail); first: "
                             f"{first}; nothing written")
        eval_good = eval_parsed.filter(lambda item: item[0] == "ok").map(lambda item: item[1])
    if job.get("stats", True):
        report["stats"] = statistics(spark, good, job)
        progress.stage("stats", f"positive rate {report['stats']['positive_rate']:.4f}")
        _write_json(job["report_dir"], "stats.json", report["stats"])
    if job.get("stats_only"):
        report["seconds"] = progress.seconds
        _write_json(job["report_dir"], "prepare.json", report)
        return report
    has_eval_input = eval_good is not None  # (a closure must not capture the RDD itself)
    split = good.mapPartitionsWithIndex(lambda i, rows: split_partition(i, rows, job, has_eval_input))
    split = split.persist(spill)
    train = split.filter(lambda item: item[0] == "train").map(lambda item: (item[1], item[2]))
    if eval_good is not None:
        evaluation = eval_good.mapPartitionsWithIndex(lambda i, rows: keyed_partition(i, rows, job))
    else:
        evaluation = split.filter(lambda item: item[0] == "eval").map(lambda item: (item[1], item[2]))
    report["train"] = write_part(train, job["train_paths"], job)
    progress.stage("train", f"{report['train']['rows']} rows in {report['train']['files']} files (split, balance, "
                            "encode, shuffle, write)")
    if job["eval_paths"]:
        report["eval"] = write_part(evaluation, job["eval_paths"], job)
        progress.stage("eval", f"{report['eval']['rows']} rows in {report['eval']['files']} files")
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
    print(f"{STAGE_PREFIX} done: {json.dumps({k: report[k] for k in ('rows', 'bad_rows') if k in report})}",
          flush=True)
    spark.stop()


if __name__ == "__main__":
    sys.exit(main())
