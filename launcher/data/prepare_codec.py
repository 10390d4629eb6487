"""Rows in, without TensorFlow: the parsers (libsvm lines or bytes, raw columns), a block of rows at a time with
numpy. Shared by `dfm data prepare`'s Spark application (shipped beside it with --py-files, so standalone: numpy
only) and `dfm data convert`; prepare_encode writes what they parse as TFRecords.
"""

import math
import re

import numpy as np

FLOAT32_LIMIT = 2.0**128 - 2.0**103  # the records hold float32: from here on a value rounds to inf


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


# A block of libsvm lines parsed as arrays. A row in the plain form (one space between fields, `id:value` pairs of
# digits, values `-?[0-9.]+` of at most 16 characters, one '.') is parsed from its bytes: each token's digits are
# read as one integer m from its last 16 bytes (SWAR: 8 digits per uint64), k digits after the dot, and the value is
# m / 10**k, which for m < 2**53 is what float() gives (both exact, one correctly rounded division). Any other row,
# or one whose label or ids are out of range, goes to parse_libsvm: its verdict and reason are the rule.
_LOW_NIBBLES = np.uint64(0x0F0F0F0F0F0F0F0F)
_POW10 = 10 ** np.arange(17, dtype=np.uint64)
_POW10F = 10.0 ** np.arange(17)
_TAIL_MASK = np.array([0] + [(2**64 - 1) ^ (2 ** (64 - 8 * n) - 1) for n in range(1, 9)], np.uint64)  # last n bytes
_PATTERNS = {}
_PLAIN_BYTES = np.zeros(256, bool)
_PLAIN_BYTES[list(b"0123456789.-: \n")] = True


def _separators(fields):
    return np.array([32, 58] * fields + [10], np.uint8)


def _swar8(words):
    """uint64 words of 8 digit values (first byte most significant) -> their numbers (linear: works for 0..15)."""
    words = ((words * np.uint64(2561)) >> np.uint64(8)) & np.uint64(0x00FF00FF00FF00FF)
    words = ((words * np.uint64(6553601)) >> np.uint64(16)) & np.uint64(0x0000FFFF0000FFFF)
    return (words * np.uint64(42949672960001)) >> np.uint64(32)


def _plain_numbers(text, rows=None):
    """ASCII rows of plain tokens separated by ' ', ':' and newlines -> (m uint64, k int64, negative bool, ok bool) per
    token; ok is False where a token is not a plain number (two dots, no digit, longer than 16, m >= 2**53).
    With rows=(n, fields): None unless the text is n rows all in the plain form (what _row_pattern matches)."""
    data = np.frombuffer(b"0" * 16 + text, np.uint8)
    ends = np.flatnonzero((data < 45) | (data == 58))
    if rows is not None:
        n, fields = rows
        if (
            len(ends) != n * (2 * fields + 1)
            or not _PLAIN_BYTES[data].all()
            or not np.array_equal(data[ends].reshape(n, -1), np.broadcast_to(_separators(fields), (n, 2 * fields + 1)))
        ):
            return None
    starts = np.empty_like(ends)
    starts[0], starts[1:] = 16, ends[:-1] + 1
    length = ends - starts
    dots = np.flatnonzero(data == 46)
    dotted = np.searchsorted(ends, dots)
    k, dot = np.zeros(len(ends), np.int64), np.zeros(len(ends), bool)
    k[dotted], dot[dotted] = np.minimum(ends[dotted] - dots - 1, 16), True  # (past 16 the token is not plain)
    negative = data[starts] == 45
    if rows is not None and (
        np.count_nonzero(data == 45) != np.count_nonzero(negative) or (negative | dot).reshape(n, -1)[:, 1::2].any()
    ):  # a '-' inside a token, an id with a sign or a dot
        return None
    ok = (length <= 16) & (length - negative - dot >= 1)
    ok[dotted[1:][np.diff(dotted) == 0]] = False
    length = np.minimum(length, 16)
    words = np.ndarray((len(data) - 7,), np.uint64, data, 0, (1,))  # 8 bytes from any offset (little-endian)
    m = _swar8(words[ends - 8] & _TAIL_MASK[np.minimum(length, 8)] & _LOW_NIBBLES)
    long = np.flatnonzero(length > 8)
    m[long] += _swar8(words[ends[long] - 16] & _TAIL_MASK[length[long] - 8] & _LOW_NIBBLES) * np.uint64(10**8)
    m[dotted] -= np.uint64(14) * _POW10[k[dotted]]  # '.' & 0x0F is 14, '-' & 0x0F is 13: take them out again
    signed = np.flatnonzero(negative)
    m[signed] -= np.uint64(13) * _POW10[length[signed] - 1]
    below = m[dotted] % _POW10[k[dotted]]
    m[dotted] = (m[dotted] - below) // np.uint64(10) + below
    return m, k, negative, ok & (m < np.uint64(2**53))


def _row_pattern(field_size, ended):
    key = (field_size, ended)
    if key not in _PATTERNS:
        _PATTERNS[key] = re.compile(r"-?[0-9.]+(?: [0-9]+:-?[0-9.]+){%d}" % field_size + ("\n" if ended else ""))
    return _PATTERNS[key]


def _joined(lines, ended):
    return "".join(lines) if ended else "\n".join(lines) + "\n"


def parse_libsvm_lines(lines, field_size, feature_size, ended=False):
    """Lines of text (each ending in a newline when ended) -> (labels float64[g], ids int64[g, F], values
    float64[g, F], bad [(index, BadRow)]): the good rows in order, as parse_libsvm parses them; blank lines skipped."""
    text = _joined(lines, ended)
    numbers = _plain_numbers(text.encode("ascii"), (len(lines), field_size)) if text.isascii() else None
    return _parse_rows(len(lines), numbers, lambda: lines, field_size, feature_size, ended)


def parse_libsvm_bytes(data, field_size, feature_size):
    """Whole lines as bytes, each ending in b"\n" (no b"\r") -> (labels, ids, values, bad [(line, BadRow)]), as
    parse_libsvm_lines parses them decoded: the plain rows straight from the bytes; the lines are decoded (UTF-8,
    undecodable bytes replaced) only when a row is not plain."""
    n, decoded = data.count(b"\n"), []

    def lines():
        if not decoded:
            decoded.extend(data.decode("utf-8", "replace").split("\n")[:-1])
        return decoded

    labels, ids, values, bad = _parse_rows(
        n, _plain_numbers(data, (n, field_size)), lines, field_size, feature_size, False
    )
    return labels, ids, values, [(lines()[index], err) for index, err in bad]


def line_chunks(data, size=1 << 20):
    """A text file's bytes -> chunks of about `size` bytes of whole lines, each line ending in b"\n": the lines
    Hadoop's LineRecordReader (sc.textFile) reads, ended by \n, \r\n or \r, a leading UTF-8 byte order mark
    dropped."""
    data = data[3:] if data.startswith(b"\xef\xbb\xbf") else data
    if b"\r" in data:
        data = b"\n".join(data.splitlines())
    start = 0
    while start < len(data):
        end = data.rfind(b"\n", start, start + size) + 1
        if end <= start:  # a line longer than size
            end = data.find(b"\n", start + size) + 1 or len(data)
        chunk = data[start:end]
        yield chunk if chunk.endswith(b"\n") else chunk + b"\n"
        start = end


def _parse_rows(n, numbers, lines, field_size, feature_size, ended):
    """n rows: numbers, _plain_numbers' verdict on all of them (None: not every row is plain); lines() their text."""
    width = 2 * field_size + 1
    plain = np.ones(n, bool)
    if numbers is None:  # not every row is plain: pick those that are
        plain = np.array([match is not None for match in map(_row_pattern(field_size, ended).fullmatch, lines())], bool)
    labels, ids, values = np.zeros(n), np.zeros((n, field_size), np.int64), np.zeros((n, field_size))
    picked = np.flatnonzero(plain)
    if len(picked):
        if numbers is None:
            chosen = [lines()[i] for i in picked.tolist()]
            numbers = _plain_numbers(_joined(chosen, ended).encode("ascii"))
        m, k, negative, ok = numbers
        number = m.astype(np.float64) / _POW10F[k]
        number[negative] *= -1.0
        number, ok, m = number.reshape(-1, width), ok.reshape(-1, width).all(1), m.reshape(-1, width)[:, 1::2]
        ok &= (number[:, 0] >= 0.0) & (number[:, 0] <= 1.0)
        if feature_size:
            ok &= (m < np.uint64(feature_size)).all(1)
        labels[picked], ids[picked], values[picked] = number[:, 0], m, number[:, 2::2]
        plain[picked[~ok]] = False
    good, bad = plain.copy(), []
    for index in np.flatnonzero(~plain).tolist():
        line = lines()[index]
        if not line.strip():
            continue
        try:
            labels[index], ids[index], values[index] = parse_libsvm(line, field_size, feature_size)
            good[index] = True
        except BadRow as err:
            bad.append((index, err))
    return labels[good], ids[good], values[good], bad


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
