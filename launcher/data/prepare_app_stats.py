"""`dfm data prepare`'s statistics, shipped beside its Spark application (--py-files) and run in the Spark image:
numpy and pyspark only. libsvm statistics are gathered while the read pass parses (`Tally`): the ids are
already numpy blocks there, and a DataFrame of them would turn every row back into a Python tuple, which cost more
than the rest of the job. Distinct counts come from a HyperLogLog sketch per column (Ertl's estimator, no bias
tables), merged across partitions by an elementwise max: written here in numpy because a sketch library's per-item
update from Python would cost more than the read, and the image has none. Raw input (tsv, csv, parquet): one
DataFrame aggregation (`statistics`)."""

import numpy as np

QUANTILES = [k / 16 for k in range(1, 16)]  # bucketize boundaries proposed from these
SHOWN_BAD_ROWS = 5  # the first bad rows a report shows
SKETCH_BITS = 12  # a distinct-count sketch of 2**12 registers per column: ~1.6% standard error
_MIX = (np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB))


def sketch_add(registers, ids):
    """Add ids int[n, F] to registers uint8[F, 2**SKETCH_BITS] (column k's ids into row k), in place. The id's
    splitmix64 hash: its top bits pick a register, the next 32 give the rank (leading zeros + 1, at most 33)."""
    with np.errstate(over="ignore"):
        z = ids.astype(np.uint64) + _MIX[0]
        z = (z ^ (z >> np.uint64(30))) * _MIX[1]
        z = (z ^ (z >> np.uint64(27))) * _MIX[2]
        z ^= z >> np.uint64(31)
    cells = registers.shape[1]
    slot = (z >> np.uint64(64 - SKETCH_BITS)).astype(np.intp) + np.arange(ids.shape[1]) * cells
    rest = ((z >> np.uint64(32 - SKETCH_BITS)) & np.uint64(0xFFFFFFFF)).astype(np.float64)
    bits = (rest.view(np.uint64) >> np.uint64(52)).astype(np.int64) - 1022  # bit length (0 -> about -1022)
    np.maximum.at(registers.reshape(-1), slot.ravel(), np.minimum(33 - bits, 33).astype(np.uint8).ravel())


def sketch_count(registers):
    """Distinct ids estimated from each column's registers (Ertl 2017, "New cardinality estimation algorithms for
    HyperLogLog sketches", the improved raw estimator: accurate from 0 up without bias tables)."""
    cells, top = registers.shape[1], 33

    def sigma(x):
        if x == 1.0:
            return float("inf")
        y, total = 1.0, x
        while True:
            x *= x
            before, total = total, total + x * y
            y += y
            if total == before:
                return total

    def tau(x):
        if x in (0.0, 1.0):
            return 0.0
        y, total = 1.0, 1.0 - x
        while True:
            x = x**0.5
            y *= 0.5
            before, total = total, total - (1.0 - x) ** 2 * y
            if total == before:
                return total / 3.0

    counts = []
    for column in registers:
        c = np.bincount(column, minlength=top + 1).astype(np.float64)
        z = cells * tau(1.0 - c[top] / cells)
        for k in range(top - 1, 0, -1):
            z = 0.5 * (z + c[k])
        z += cells * sigma(c[0] / cells)
        counts.append(0 if z == float("inf") else round(cells * cells / (2 * np.log(2)) / z))
    return counts


class Tally:
    """One partition's read pass: bad rows (the first SHOWN_BAD_ROWS kept, by their place in the input), good rows, and
    the statistics' partial (libsvm with statistics on, else None): [label sum, largest id per column, the columns'
    sketch registers]."""

    def __init__(self, job, partition):
        self.gather = job["input"]["format"] == "libsvm" and job.get("stats", True)
        self.partition = partition
        self.bad_rows = self.rows = 0
        self.partial, self.examples = None, []

    def bad(self, text):
        if len(self.examples) < SHOWN_BAD_ROWS:
            self.examples.append(((self.partition, self.bad_rows), text))
        self.bad_rows += 1

    def good(self, block):
        labels = block[0]
        self.rows += len(labels)
        if not self.gather:
            return
        ids = block[1][0]
        if self.partial is None:
            self.partial = [
                0.0,
                np.full(ids.shape[1], -1, np.int64),
                np.zeros((ids.shape[1], 1 << SKETCH_BITS), np.uint8),
            ]
        self.partial[0] += float(labels.sum(dtype=np.float64))
        np.maximum(self.partial[1], ids.max(axis=0), out=self.partial[1])
        sketch_add(self.partial[2], ids)

    def value(self):
        """(bad rows, good rows, partial, [((partition, place), text)] of the first bad rows): merge_tallies' input."""
        return self.bad_rows, self.rows, self.partial, self.examples


def merge_tallies(a, b):
    """Two tallies' sum, in any order: the bad rows kept are the first by their place in the input."""
    if a[2] is None or b[2] is None:
        partial = a[2] if b[2] is None else b[2]
    else:
        partial = [a[2][0] + b[2][0], np.maximum(a[2][1], b[2][1]), np.maximum(a[2][2], b[2][2])]
    return a[0] + b[0], a[1] + b[1], partial, sorted(a[3] + b[3])[:SHOWN_BAD_ROWS]


def indexed_statistics(rows, partial, field_size):
    """libsvm statistics from the read pass's merged partial: per field the distinct ids and the largest."""
    labels, largest, registers = partial if partial is not None else (0.0, [-1] * field_size, None)
    distinct = sketch_count(registers) if registers is not None else [0] * field_size
    columns = {
        f"field{k}": {"kind": "indexed", "distinct": int(distinct[k]), "max_id": int(largest[k])}
        for k in range(field_size)
    }
    return {
        "rows": rows,
        "positive_rate": labels / rows if rows else 0.0,
        "columns": columns,
        "feature_size": 1 + max([c["max_id"] for c in columns.values()] + [-1]),
    }


def statistics(spark, good, job):
    """Raw input, per column over every good row: approx distinct, missing share, quantiles, multi-hot lengths;
    the positive rate. One aggregation pass over a DataFrame of the parsed rows."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    features = job["features"]
    numeric, categorical, bags = features["numeric"], features["categorical"], list(features["multi_hot"])
    schema = T.StructType(
        [T.StructField("label", T.DoubleType())]
        + [T.StructField(f"n{k}", T.DoubleType()) for k in range(len(numeric))]
        + [T.StructField(f"c{k}", T.StringType()) for k in range(len(categorical))]
        + [T.StructField(f"m{k}", T.ArrayType(T.StringType())) for k in range(len(bags))]
    )
    frame_ = spark.createDataFrame(good.map(lambda p: (p[0], *p[1], *p[2], *p[3])), schema)
    aggs = [F.count(F.lit(1)).alias("rows"), F.avg("label").alias("positive_rate")]
    for k in range(len(numeric)):
        column = F.col(f"n{k}")
        aggs += [
            F.avg(column.isNull().cast("double")).alias(f"n{k}_missing"),
            F.min(column).alias(f"n{k}_min"),
            F.max(column).alias(f"n{k}_max"),
            F.approx_count_distinct(column).alias(f"n{k}_distinct"),
            F.percentile_approx(column, QUANTILES, 10000).alias(f"n{k}_q"),
        ]
    for k in range(len(categorical)):
        column = F.col(f"c{k}")
        aggs += [
            F.avg(column.isNull().cast("double")).alias(f"c{k}_missing"),
            F.approx_count_distinct(column).alias(f"c{k}_distinct"),
        ]
    for k in range(len(bags)):
        length = F.size(F.col(f"m{k}"))
        aggs += [
            F.avg((length == 0).cast("double")).alias(f"m{k}_missing"),
            F.max(length).alias(f"m{k}_longest"),
            F.percentile_approx(length, [0.99], 10000).alias(f"m{k}_p99"),
        ]
    result = frame_.agg(*aggs).first().asDict()
    columns = {}
    for k, name in enumerate(numeric):
        columns[name] = {
            "kind": "numeric",
            "missing": round(result[f"n{k}_missing"] or 0.0, 6),
            "min": result[f"n{k}_min"],
            "max": result[f"n{k}_max"],
            "distinct": int(result[f"n{k}_distinct"] or 0),
            "quantiles": result[f"n{k}_q"] or [],
        }
    for k, name in enumerate(categorical):
        columns[name] = {
            "kind": "categorical",
            "missing": round(result[f"c{k}_missing"] or 0.0, 6),
            "distinct": int(result[f"c{k}_distinct"] or 0),
        }
    if bags:  # distinct tokens need the bags exploded: a second, narrow pass
        for k, name in enumerate(bags):
            tokens = frame_.select(F.explode(f"m{k}").alias("t")).agg(F.approx_count_distinct("t")).first()[0]
            columns[name] = {
                "kind": "multi_hot",
                "separator": features["multi_hot"][name],
                "missing": round(result[f"m{k}_missing"] or 0.0, 6),
                "distinct": int(tokens or 0),
                "longest": int(result[f"m{k}_longest"] or 0),
                "max_length": max(1, int((result[f"m{k}_p99"] or [1])[0])),
            }
    return {"rows": int(result["rows"]), "positive_rate": float(result["positive_rate"] or 0.0), "columns": columns}
