"""The raw-feature spec of the bundled DeepFM: read and check a `features:` mapping, and lay its fields
out in one shared id space.

Pure Python (no TensorFlow): the launcher checks a spec with the same rules the entry points apply.

Fields come in declaration order: numeric, then categorical, then multi-hot, each in its mapping's order.
Field f owns the ids [offset, offset + size); id `offset` (slot 0) is the field's missing value.
  numeric log1p | none      2 ids: missing (value 1), present (value = the transformed number)
  numeric bucketize         2 + len(boundaries) ids: missing, then one per bucket (value 1)
  categorical hash_buckets  1 + N ids: missing, then the hash bucket (value 1)
  categorical vocabulary    2 + V ids: missing, the file's tokens by line, then out-of-vocabulary
  multi_hot                 1 + N ids over max_length slots: each token's hash bucket with weight 1/length
                            (mean) or 1 (sum), padding weight 0; an empty bag is the missing id, weight 1
Every field but a multi-hot one fills one slot; the model sums a field's slots into one embedding.
"""

import re
from dataclasses import dataclass, field

FORMATS = ("tsv", "csv", "tfrecord")
TEXT_FORMATS = {"tsv": "\t", "csv": ","}
TRANSFORMS = ("log1p", "bucketize", "none")
POOLINGS = ("mean", "sum")
BAD_ROWS = ("skip", "fail")
BAD_ROWS_KEYS = ("skip", "max_fraction")
# bad_rows: skip fails the run when more than this share of the rows read were bad (bad_rows.max_fraction)
DEFAULT_MAX_BAD_FRACTION = 0.01
# The batch key of the rows bad_rows: skip dropped (deepfm_raw adds it, the loops count it); NAME refuses it
# as a feature name (it starts with `_`).
BAD_ROWS_KEY = "_bad_rows"
KEYS = ("format", "label", "columns", "numeric", "categorical", "multi_hot", "bad_rows")
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,63}$")  # also a SavedModel signature input name
MAX_FEATURE_SIZE = 2**31 - 1  # ids of one int32-indexable table
MAX_HASH_BUCKETS = 2**30
MAX_LENGTH = 1000
MAX_BOUNDARIES = 10000
MAX_COLUMNS = 10000


@dataclass(frozen=True)
class NumericField:
    name: str
    transform: str = "log1p"
    boundaries: tuple = ()
    embedding_size: int = 0  # 0 = the model's


@dataclass(frozen=True)
class CategoricalField:
    name: str
    hash_buckets: int = 0
    vocabulary: str = ""  # a file of one token per line, instead of hashing
    embedding_size: int = 0


@dataclass(frozen=True)
class MultiHotField:
    name: str
    separator: str
    hash_buckets: int
    max_length: int
    pooling: str = "mean"
    embedding_size: int = 0


@dataclass(frozen=True)
class FeatureSpec:
    format: str
    label: str
    columns: tuple = ()
    numeric: tuple = ()
    categorical: tuple = ()
    multi_hot: tuple = ()
    bad_rows: str = "skip"
    max_bad_fraction: float = DEFAULT_MAX_BAD_FRACTION  # with skip: the share of bad rows read past which the run fails

    @property
    def fields(self):
        return self.numeric + self.categorical + self.multi_hot

    @property
    def delimiter(self):
        return TEXT_FORMATS.get(self.format)


class SpecError(ValueError):
    """A features mapping that does not check out; `problems` lists (key path, message)."""

    def __init__(self, problems):
        self.problems = problems
        super().__init__("; ".join(format_problem(p) for p in problems))


def format_problem(problem):
    path, message = problem
    return f"features.{'.'.join(str(k) for k in path)}: {message}" if path else f"features: {message}"


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and value == value
        and abs(value) != float("inf")
    )


def _check_size(problems, path, value, low, high, what):
    if not _is_int(value) or not low <= value <= high:
        problems.append((path, f"{what} must be a whole number from {low} to {high}, got {value!r}"))


def _check_keys(problems, path, entry, allowed):
    for key in entry:
        if key not in allowed:
            problems.append((path + (key,), f"unknown key; expected one of {', '.join(allowed)}"))


def _check_bad_rows(problems, policy):
    """skip | fail | {skip: true|false, max_fraction: 0..1}."""
    if not isinstance(policy, dict):
        if policy not in BAD_ROWS:
            problems.append(
                (("bad_rows",), f"must be skip, fail or {{skip: true, max_fraction: 0.01}}, got {policy!r}")
            )
        return
    _check_keys(problems, ("bad_rows",), policy, BAD_ROWS_KEYS)
    if not isinstance(policy.get("skip", True), bool):
        problems.append((("bad_rows", "skip"), f"must be true or false, got {policy.get('skip')!r}"))
    fraction = policy.get("max_fraction", DEFAULT_MAX_BAD_FRACTION)
    if not _is_number(fraction) or not 0 <= fraction <= 1:
        problems.append((("bad_rows", "max_fraction"), f"must be a number from 0 to 1, got {fraction!r}"))


def bad_rows_policy(policy):
    """(skip | fail, max_fraction) of a checked bad_rows value."""
    if isinstance(policy, dict):
        skip = policy.get("skip", True)
        return ("skip" if skip else "fail"), float(policy.get("max_fraction", DEFAULT_MAX_BAD_FRACTION))
    return policy, DEFAULT_MAX_BAD_FRACTION


def validate(features):
    """Every problem of a `features:` mapping as (key path, message), [] when it checks out. Pure."""
    problems = []
    if not isinstance(features, dict):
        return [((), f"must be a mapping with {', '.join(KEYS)}, got {type(features).__name__}")]
    _check_keys(problems, (), features, KEYS)
    fmt = features.get("format")
    if fmt not in FORMATS:
        problems.append((("format",), f"must be one of {', '.join(FORMATS)}, got {fmt!r}"))
    _check_bad_rows(problems, features.get("bad_rows", "skip"))
    label = features.get("label")
    if not isinstance(label, str) or not NAME.match(label):
        problems.append((("label",), f"must name the label column (letters, digits, _), got {label!r}"))
    names = {}
    for section in ("numeric", "categorical", "multi_hot"):
        entries = features.get(section) or {}
        if not isinstance(entries, dict):
            problems.append(((section,), f"must map feature names to their settings, got {type(entries).__name__}"))
            continue
        for name, entry in entries.items():
            path = (section, name)
            if not isinstance(name, str) or not NAME.match(name):
                problems.append((path, "a feature name is a letter then letters, digits or _ (at most 64)"))
            if name in names:
                problems.append((path, f"already declared under {names[name]}; a column is one feature"))
            names.setdefault(name, section)
            if name == label:
                problems.append((path, "the label column cannot also be a feature"))
            entry = {} if entry is None and section == "numeric" else entry
            if not isinstance(entry, dict):
                problems.append((path, f"settings must be a mapping, got {entry!r}"))
                continue
            _check_field(problems, section, path, entry)
    if not names:
        problems.append(((), "declare at least one feature under numeric, categorical or multi_hot"))
    _check_columns(problems, features, fmt, label, names)
    if not problems:
        size = feature_size_of(spec_from_dict(features, check=False), vocabulary_sizes=_ZERO)
        if size > MAX_FEATURE_SIZE:
            problems.append(((), f"the fields need {size:,} ids, more than {MAX_FEATURE_SIZE:,}; lower hash_buckets"))
    return problems


def _check_field(problems, section, path, entry):
    if "embedding_size" in entry:
        _check_size(problems, path + ("embedding_size",), entry["embedding_size"], 1, 4096, "embedding_size")
    if section == "numeric":
        _check_keys(problems, path, entry, ("transform", "boundaries", "embedding_size"))
        transform = entry.get("transform", "log1p")
        if transform not in TRANSFORMS:
            problems.append((path + ("transform",), f"must be one of {', '.join(TRANSFORMS)}, got {transform!r}"))
        bounds = entry.get("boundaries")
        if transform == "bucketize":
            if (
                not isinstance(bounds, list)
                or not bounds
                or len(bounds) > MAX_BOUNDARIES
                or not all(_is_number(b) for b in bounds)
            ):
                problems.append(
                    (
                        path + ("boundaries",),
                        f"bucketize needs a list of 1 to {MAX_BOUNDARIES} numbers, e.g. [1, 3, 7, 15]",
                    )
                )
            elif any(a >= b for a, b in zip(bounds, bounds[1:])):
                problems.append((path + ("boundaries",), "must increase strictly"))
        elif bounds is not None:
            problems.append((path + ("boundaries",), "only transform: bucketize takes boundaries"))
    elif section == "categorical":
        _check_keys(problems, path, entry, ("hash_buckets", "vocabulary", "embedding_size"))
        if ("hash_buckets" in entry) == ("vocabulary" in entry):
            problems.append((path, "give either hash_buckets: N or vocabulary: a file of one token per line"))
        elif "hash_buckets" in entry:
            _check_size(problems, path + ("hash_buckets",), entry["hash_buckets"], 1, MAX_HASH_BUCKETS, "hash_buckets")
        elif not isinstance(entry["vocabulary"], str) or not entry["vocabulary"]:
            problems.append((path + ("vocabulary",), "must be the path of a file with one token per line"))
    else:
        _check_keys(problems, path, entry, ("separator", "hash_buckets", "max_length", "pooling", "embedding_size"))
        separator = entry.get("separator")
        if not isinstance(separator, str) or len(separator) != 1 or separator in "\t\n\r":
            problems.append(
                (path + ("separator",), f"must be one character other than tab or newline, e.g. '|', got {separator!r}")
            )
        _check_size(problems, path + ("hash_buckets",), entry.get("hash_buckets"), 1, MAX_HASH_BUCKETS, "hash_buckets")
        _check_size(problems, path + ("max_length",), entry.get("max_length"), 1, MAX_LENGTH, "max_length")
        if entry.get("pooling", "mean") not in POOLINGS:
            problems.append((path + ("pooling",), f"must be mean or sum, got {entry.get('pooling')!r}"))


def _check_columns(problems, features, fmt, label, names):
    columns = features.get("columns")
    if fmt == "tfrecord":
        if columns is not None:
            problems.append((("columns",), "tfrecord reads features by name; columns is for tsv and csv only"))
        return
    if fmt not in TEXT_FORMATS:
        return
    if (
        not isinstance(columns, list)
        or not columns
        or len(columns) > MAX_COLUMNS
        or not all(isinstance(c, str) and NAME.match(c) for c in columns)
    ):
        problems.append(
            (("columns",), f"{fmt} needs the column names in file order (letters, digits, _), e.g. [clicked, i1, c1]")
        )
        return
    seen = set()
    for column in columns:
        if column in seen:
            problems.append((("columns",), f"{column} appears twice"))
        seen.add(column)
    if isinstance(label, str) and label not in seen:
        problems.append((("label",), f"{label} is not among the columns"))
    for name, section in names.items():
        if name not in seen:
            problems.append(((section, name), "not among the columns; add it to columns or remove the feature"))
    for name, entry in (features.get("multi_hot") or {}).items():
        if isinstance(entry, dict) and entry.get("separator") == TEXT_FORMATS[fmt]:
            problems.append((("multi_hot", name, "separator"), f"is the {fmt} column delimiter; pick another"))


def spec_from_dict(features, check=True):
    """A FeatureSpec from a plain (JSON-able) mapping; SpecError lists every problem."""
    if check:
        problems = validate(features)
        if problems:
            raise SpecError(problems)
    size = lambda entry: int(entry.get("embedding_size", 0))  # noqa: E731
    numeric = tuple(
        NumericField(n, (e or {}).get("transform", "log1p"), tuple((e or {}).get("boundaries") or ()), size(e or {}))
        for n, e in (features.get("numeric") or {}).items()
    )
    categorical = tuple(
        CategoricalField(n, int(e.get("hash_buckets", 0)), e.get("vocabulary", ""), size(e))
        for n, e in (features.get("categorical") or {}).items()
    )
    multi_hot = tuple(
        MultiHotField(
            n, e["separator"], int(e["hash_buckets"]), int(e["max_length"]), e.get("pooling", "mean"), size(e)
        )
        for n, e in (features.get("multi_hot") or {}).items()
    )
    return FeatureSpec(
        features["format"],
        features["label"],
        tuple(features.get("columns") or ()),
        numeric,
        categorical,
        multi_hot,
        *bad_rows_policy(features.get("bad_rows", "skip")),
    )


@dataclass(frozen=True)
class FieldSlots:
    """One field's place: ids [offset, offset + size), model input slots [first_slot, first_slot + slots)."""

    spec: object
    offset: int
    size: int
    first_slot: int
    slots: int


@dataclass(frozen=True)
class Layout:
    fields: tuple
    feature_size: int  # the shared id space: the embedding tables' rows
    slot_fields: tuple = field(default=())  # the field index of every input slot

    @property
    def field_size(self):
        """Embeddings the model combines (one per field, after pooling)."""
        return len(self.fields)

    @property
    def slot_count(self):
        """Columns of the (ids, values) the model reads."""
        return len(self.slot_fields)

    def by_name(self, name):
        return next(f for f in self.fields if f.spec.name == name)

    def embedding_sizes(self, default):
        """Per field, its embedding width within the model's `default` (which must be the widest)."""
        sizes = [f.spec.embedding_size or default for f in self.fields]
        too_wide = [f.spec.name for f, k in zip(self.fields, sizes) if k > default]
        if too_wide:
            raise ValueError(
                f"fields {too_wide} ask for embeddings wider than the model's embedding_size "
                f"{default}; raise embedding_size to the widest field's"
            )
        return sizes


def vocabulary_size(path):
    """Lines of a vocabulary file (one token per line), as TensorFlow's text-file table counts them."""
    with open(path, encoding="utf-8") as handle:
        return sum(1 for _ in handle)


_ZERO = {}


def _ids_of(spec, vocabulary_sizes):
    if isinstance(spec, NumericField):
        return 2 + len(spec.boundaries) if spec.transform == "bucketize" else 2
    if isinstance(spec, CategoricalField) and spec.vocabulary:
        known = vocabulary_sizes.get(spec.name) if vocabulary_sizes is not None else None
        if known is None:
            known = 0 if vocabulary_sizes is _ZERO else vocabulary_size(spec.vocabulary)
        return 2 + known
    return 1 + spec.hash_buckets


def feature_size_of(spec, vocabulary_sizes=None):
    return sum(_ids_of(f, vocabulary_sizes) for f in spec.fields)


def build_layout(spec, vocabulary_sizes=None):
    """Offsets and slots of every field. vocabulary_sizes: {field: lines} (default: read the files)."""
    fields, slot_fields, offset = [], [], 0
    for index, spec_field in enumerate(spec.fields):
        size = _ids_of(spec_field, vocabulary_sizes)
        slots = spec_field.max_length if isinstance(spec_field, MultiHotField) else 1
        fields.append(FieldSlots(spec_field, offset, size, len(slot_fields), slots))
        slot_fields += [index] * slots
        offset += size
    return Layout(tuple(fields), offset, tuple(slot_fields))
