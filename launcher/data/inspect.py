"""Propose a spec's `features:` section from the first rows of a TSV or CSV file.

Per column, from the sample: a 0/1 column with no blanks can be the label (the first one is); columns
whose values all parse as numbers are numeric (non-negative right-skewed integers, like counts, bucketized
at powers of two; other non-negative right-skewed numbers `log1p`; else `none`); text columns whose
values hold a list separator with recurring tokens are multi-hot;
other text columns are categorical. Bucket counts are the next power of two above ten times the
distinct values seen, within [MIN_BUCKETS, MAX_BUCKETS]: a sample sees only part of a vocabulary.
"""

from __future__ import annotations

import csv
import io
import itertools
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from launcher.data import textfile

FORMATS = {"\t": "tsv", ",": "csv"}  # the delimiters a spec's text formats read
LIST_SEPARATORS = ("|", ";", ",")
RAGGED_TOLERANCE = 0.01  # share of sampled rows with another field count that are skipped, not fatal
MIN_BUCKETS, MAX_BUCKETS, BUCKETS_PER_DISTINCT = 16, 1 << 20, 10
MULTI_HOT_MIN_SHARE = 0.05  # of a column's non-empty values holding the separator
SKEWED = 1.0  # sample skewness above which non-negative numbers get log-scaled
MAX_COUNT_BOUNDARY = (1 << 31) - 1  # the last power-of-two boundary a count column gets
_DETECT_LINES = 200
NONFINITE_NOTE = (
    "categorical, not numeric: {nonfinite} sampled values are not finite (e.g. {nonfinite_example!r}); "
    "clean them, or declare the column numeric and such rows become bad rows"
)


class InspectError(ValueError):
    """Input this command cannot read; the message is one line."""


@dataclass
class Sample:
    path: Path
    delimiter: str
    columns: list[str]
    rows: list[list[str]]
    header: bool
    ragged: int = 0  # rows skipped for another field count


@dataclass
class Proposal:
    features: dict
    stats: dict = field(default_factory=dict)
    sample: Sample | None = None


def read_sample(path: Path, rows: int, columns: list[str] | None = None, header: bool | None = None) -> Sample:
    """The first `rows` data rows of `path` (plain or gzip), split on the detected delimiter (tab or comma)."""
    path = Path(path)
    if not path.exists():
        raise InspectError(f"{path}: no such file")
    if path.is_dir():
        raise InspectError(f"{path} is a folder; give one of its files")
    if b"\x00" in textfile.head(path):
        raise InspectError(f"{path} is binary (NUL bytes), not TSV or CSV text")
    try:
        with textfile.open_text(path, errors="strict", newline="") as (handle, _):
            first = list(itertools.islice(handle, _DETECT_LINES))
            delimiter = _delimiter(path, first)
            handle.seek(0)
            reader = csv.reader(handle, delimiter=delimiter)
            parsed = [(reader.line_num, row) for row in itertools.islice(reader, rows + 1) if row]
    except UnicodeDecodeError:
        raise InspectError(f"{path} is not UTF-8 text") from None
    except textfile.GZIP_ERRORS as err:
        raise InspectError(f"{path}: damaged gzip data ({err}); check the download (gzip -t {path})") from None
    except csv.Error as err:
        raise InspectError(f"{path}: {err}") from None
    if not parsed:
        raise InspectError(f"{path} has no rows")
    has_header = _has_header([row for _, row in parsed]) if header is None else header
    names = parsed[0][1] if has_header else None
    body = parsed[1:] if has_header else parsed[:rows]
    width = Counter(len(row) for _, row in body).most_common(1)[0][0] if body else len(names or [])
    if columns is not None:
        if len(columns) != width:
            raise InspectError(
                f"--columns names {len(columns)} columns, {path} has {width} ({_delimiter_name(delimiter)}-separated)"
            )
        names = columns
    elif names is None or len(names) != width:
        names = [f"col{k}" for k in range(width)]
    ragged = [(line, len(row)) for line, row in body if len(row) != width]
    if len(ragged) > RAGGED_TOLERANCE * len(body):
        line, count = ragged[0]
        raise InspectError(
            f"{path}:{line}: {count} fields, expected {width}; {len(ragged)} of {len(body)} "
            f"sampled rows have another field count (more than {RAGGED_TOLERANCE:.0%})"
        )
    kept = [row for _, row in body if len(row) == width]
    if not kept:
        raise InspectError(f"{path} has a header but no data rows")
    return Sample(path, delimiter, list(names), kept, has_header, len(ragged))


def propose(sample: Sample, label: str | None = None) -> Proposal:
    """The `features:` section (key names as the spec reads them) and per-column statistics."""
    cells = {name: [row[k].strip() for row in sample.rows] for k, name in enumerate(sample.columns)}
    profiles = {name: _profile(values) for name, values in cells.items()}
    if label is None:
        label = next((name for name, p in profiles.items() if p.get("binary") and not p["missing"]), None)
        if label is None:
            raise InspectError(
                f"{sample.path}: no column holds only 0 and 1 in the sample; name the label with --label"
            )
    elif label not in profiles:
        raise InspectError(f"--label {label} is not a column (columns: {', '.join(sample.columns)})")
    numeric, categorical, multi_hot, stats = {}, {}, {}, {}
    for name, profile in profiles.items():
        if name == label:
            values = np.asarray([float(v) for v in cells[name] if v])
            stats[name] = {"kind": "label", "positive_rate": float(values.mean()) if len(values) else 0.0}
            continue
        kind = profile.pop("kind")
        stats[name] = {"kind": kind, **{k: v for k, v in profile.items() if k != "binary"}}
        if kind in ("integer", "float"):
            skewed = profile["min"] >= 0 and profile["skew"] > SKEWED and not profile.get("binary")
            numeric[name] = (
                count_buckets(profile["max"])
                if skewed and kind == "integer"
                else {"transform": "log1p" if skewed else "none"}
            )
        elif kind == "multi_hot":
            multi_hot[name] = {
                "separator": profile["separator"],
                "hash_buckets": buckets(profile["distinct"]),
                "max_length": profile["max_length"],
                "pooling": "mean",
            }
        else:
            categorical[name] = {"hash_buckets": buckets(profile["distinct"])}
    features = {
        "format": FORMATS[sample.delimiter],
        "label": label,
        "columns": list(sample.columns),
        "numeric": numeric,
        "categorical": categorical,
        "multi_hot": multi_hot,
    }
    return Proposal(features, stats, sample)


def buckets(distinct: int) -> int:
    """The next power of two at or above BUCKETS_PER_DISTINCT x `distinct`, within [MIN, MAX]."""
    wanted = max(1, distinct * BUCKETS_PER_DISTINCT)
    return int(min(MAX_BUCKETS, max(MIN_BUCKETS, 1 << math.ceil(math.log2(wanted)))))


def _delimiter_name(delimiter: str) -> str:
    return {"\t": "tab", ",": "comma"}[delimiter]


def _delimiter(path: Path, lines: list[str]) -> str:
    """The delimiter (tab, then comma) that splits the most lines into one field count of 2 or more."""
    best, best_share = None, 0.0
    for delimiter in FORMATS:
        counts = [len(row) for row in csv.reader(io.StringIO("".join(lines)), delimiter=delimiter) if row]
        if not counts:
            continue
        width, seen = Counter(counts).most_common(1)[0]
        if width >= 2 and seen / len(counts) > best_share:
            best, best_share = delimiter, seen / len(counts)
    if best is None:
        raise InspectError(f"{path}: found no tab or comma between columns; dfm reads TSV and CSV text")
    return best


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _has_header(rows: list[list[str]]) -> bool:
    """A first row of distinct non-numeric names, over a column that is numeric below it, or whose
    names never recur in their columns."""
    first, rest = rows[0], rows[1:]
    if not rest or any(not v.strip() or _number(v) is not None for v in first) or len(set(first)) < len(first):
        return False
    columns = list(zip(*[row for row in rest if len(row) == len(first)]))
    if not columns:
        return False
    numeric_below = any(
        all(_number(v) is not None for v in column if v.strip()) and any(v.strip() for v in column)
        for column in columns
    )
    return numeric_below or all(name not in column for name, column in zip(first, columns))


def _profile(values: list[str]) -> dict:
    present = [v for v in values if v]
    missing = round(1.0 - len(present) / len(values), 6) if values else 0.0
    numbers = [_number(v) for v in present]
    if present and all(n is not None for n in numbers):
        array = np.asarray(numbers, dtype=np.float64)
        integer = all(_is_int(v) for v in present)
        std = array.std()
        skew = float(((array - array.mean()) ** 3).mean() / std**3) if std > 0 else 0.0
        low, high = (int(array.min()), int(array.max())) if integer else (float(array.min()), float(array.max()))
        return {
            "kind": "integer" if integer else "float",
            "min": low,
            "max": high,
            "missing": missing,
            "skew": round(skew, 3),
            "binary": bool(set(np.unique(array)) <= {0.0, 1.0}),
        }
    nonfinite = [v for v, n in zip(present, numbers) if n is None and _is_float(v)]
    if nonfinite and len(nonfinite) == sum(n is None for n in numbers):  # numbers, but some inf or nan
        return {
            "kind": "categorical",
            "distinct": len(set(present)),
            "missing": missing,
            "nonfinite": len(nonfinite),
            "nonfinite_example": nonfinite[0],
        }
    separator, lengths, tokens = _list_shape(present)
    if separator is not None:
        return {
            "kind": "multi_hot",
            "separator": separator,
            "distinct": len(tokens),
            "missing": missing,
            "max_length": max(1, int(math.ceil(np.percentile(lengths, 99)))),
            "longest": int(max(lengths)),
        }
    return {"kind": "categorical", "distinct": len(set(present)), "missing": missing}


def _is_float(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_int(text: str) -> bool:
    try:
        int(text)
    except ValueError:
        return False
    return True


def _list_shape(present: list[str]) -> tuple[str | None, list[int], set[str]]:
    """(separator, tokens per value, distinct tokens) when the values are lists with recurring tokens."""
    # The delimiter counts too: inside a parsed value it was quoted, so it separates the list's tokens.
    shares = {s: sum(s in v for v in present) / len(present) for s in LIST_SEPARATORS} if present else {}
    separator = max(LIST_SEPARATORS, key=lambda s: shares.get(s, 0.0))
    if shares.get(separator, 0.0) < MULTI_HOT_MIN_SHARE:
        return None, [], set()
    split = [[t for t in v.split(separator) if t] for v in present]
    lengths = [len(tokens) for tokens in split]
    distinct = {t for tokens in split for t in tokens}
    if len(distinct) > 0.5 * sum(lengths):  # tokens that rarely recur are free text, not a list of ids
        return None, [], set()
    return separator, lengths, distinct


def to_yaml(proposal: Proposal) -> str:
    """The proposal as a `features:` block, each column's sample statistics in a comment beside it."""
    features, stats, sample = proposal.features, proposal.stats, proposal.sample
    lines = []
    if sample is not None:
        lines.append(
            f"# proposed by `dfm data inspect` from the first {len(sample.rows)} rows of {sample.path} "
            f"({_delimiter_name(sample.delimiter)}-separated"
            + (", first line a header: the training input must skip it" if sample.header else ", no header")
            + (f"; skipped {sample.ragged} rows with another field count" if sample.ragged else "")
            + ")"
        )
    label = features["label"]
    lines += [
        "features:",
        f"  format: {features['format']}",
        f"  label: {_flow(label)}  # {stats[label]['positive_rate']:.1%} positive",
        f"  columns: {_flow(features['columns'])}",
    ]
    lines += section_lines(features, lambda name: _describe(stats[name]))
    return "\n".join(lines) + "\n"


def count_buckets(largest: float) -> dict:
    """A count column's transform: one id per power of two (boundaries 2^k - 1, up to the first at or above
    the sample's largest count), so each order of magnitude gets its own weight; log1p gives the column one
    weight scaled by the value (0.008 eval AUC lower on the raw sample: BENCHMARKS.md, "Model quality")."""
    boundaries = [1]
    while boundaries[-1] < min(largest, MAX_COUNT_BOUNDARY):
        boundaries.append(2 * boundaries[-1] + 1)
    return {"transform": "bucketize", "boundaries": boundaries}


def section_lines(features: dict, comment) -> list[str]:
    """The numeric, categorical and multi_hot blocks of a `features:` section as YAML lines, `comment(name)`
    (the column's statistics) beside each entry."""
    lines = []
    for section in ("numeric", "categorical", "multi_hot"):
        entries = features[section]
        lines.append(f"  {section}:" + ("" if entries else " {}"))
        lines += [f"    {_flow(name)}: {_flow(entry)}  # {comment(name)}" for name, entry in entries.items()]
    return lines


def _describe(stat: dict) -> str:
    missing = f"{stat['missing']:.1%} missing"
    if stat["kind"] in ("integer", "float"):
        return f"{stat['kind']} {stat['min']}..{stat['max']}, skew {stat['skew']}, {missing}"
    if stat["kind"] == "multi_hot":
        return f"{stat['distinct']} distinct tokens, up to {stat['longest']} per row, {missing}"
    return f"{stat['distinct']} distinct in the sample, {missing}" + (
        f"; {NONFINITE_NOTE.format(**stat)}" if stat.get("nonfinite") else ""
    )


def notes(proposal: Proposal) -> list[str]:
    """What the reader should know about the proposal: columns of numbers made categorical by inf/nan values."""
    return [
        f"{name}: {NONFINITE_NOTE.format(**stat)}" for name, stat in proposal.stats.items() if stat.get("nonfinite")
    ]


def _flow(value: object) -> str:
    import yaml

    text = yaml.safe_dump(value, default_flow_style=True, width=1 << 30, sort_keys=False)
    return text.removesuffix("\n...\n").strip()
