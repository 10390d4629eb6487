"""Rows out as TFRecords of tf.train.Examples, without TensorFlow or protobuf: the encoder of `dfm data prepare`'s
Spark application (shipped beside it with --py-files, so standalone: numpy and google-crc32c only) and of
`dfm data convert`; prepare_codec holds the parsers.

A libsvm block is encoded as arrays: every record has the same fields, so an Example is constant bytes around
the label, the values (fixed width) and the ids (varints, whose lengths decide the few length prefixes), and the
TFRecord framing is computed for the whole block at once; only the CRC32C of each record is one C call per row.
"""

import os
import struct
import sys

import numpy as np

MASK_DELTA = 0xA282EAD8
SHIPPED_WHEEL = "google_crc32c-cext"  # a google-crc32c wheel for the image's Python, renamed .zip for --py-files


# ------------------------------------------------------------------------------------------------ CRC32C
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


def crc32c_function():
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


def bytes_feature(values):
    return _field(1, b"".join(_field(1, v) for v in values))


def example(features):
    """features: [(name, encoded Feature)] -> a serialized tf.train.Example."""
    entries = b"".join(_field(1, _field(1, name.encode()) + _field(2, feature)) for name, feature in features)
    return _field(1, entries)


def encode_raw(parsed, features):
    """A parsed raw row -> the serialized tf.train.Example of raw features (missing values absent)."""
    label, numeric, categorical, bags = parsed
    parts = [(features["label"], float_feature([label]))]
    parts += [(name, float_feature([v])) for name, v in zip(features["numeric"], numeric) if v is not None]
    parts += [
        (name, bytes_feature([v.encode()])) for name, v in zip(features["categorical"], categorical) if v is not None
    ]
    parts += [(name, bytes_feature([t.encode() for t in bag])) for name, bag in zip(features["multi_hot"], bags)]
    return example(parts)


# ------------------------------------------------------------------------------------- blocks, vectorized
def varints(values):
    """Non-negative integers[n] -> (bytes uint8[n, w], mask bool[n, w]): each value's varint, left-aligned."""
    values = np.asarray(values, np.uint64)
    size, top = np.ones(values.shape, np.int64), int(values.max(initial=0))
    for bits in range(7, 64, 7):
        if top < 1 << bits:
            break
        size += values >= np.uint64(1 << bits)
    width = int(size.max(initial=1))
    shifts = np.arange(width, dtype=np.uint64) * np.uint64(7)
    groups = ((values[..., None] >> shifts) & np.uint64(0x7F)).astype(np.uint8)
    more = np.arange(width) < (size[..., None] - 1)
    return groups | (more.astype(np.uint8) << 7), np.arange(width) < size[..., None]


def _constant(block, n):
    data = np.frombuffer(block, np.uint8)
    return np.broadcast_to(data, (n, len(data))), np.ones((n, len(data)), bool)


def _entry_head(name, fields):
    """A float feature's map entry up to its values (constant for a given width)."""
    return _field(1, _field(1, name.encode()) + _field(2, float_feature([0.0] * fields)))[: -4 * fields]


def encode_libsvm(labels, ids, values):
    """(labels[n], ids[n, F], values[n, F]) -> (bytes uint8[total], lengths int64[n]) of n serialized Examples
    holding ids, label and values: byte for byte what protobuf's deterministic serialization writes (map keys
    sorted)."""
    n, fields = ids.shape
    payload, payload_mask = varints(ids.reshape(-1))
    ids_entry = [(payload.reshape(n, -1), payload_mask.reshape(n, -1))]
    length = ids_entry[0][1].sum(1)
    # inside out: Int64List 0a len payload; Feature 1a len list; entry body 0a 03 "ids" 12 len feature; entry 0a len
    for head in (b"\x0a", b"\x1a", _field(1, b"ids") + b"\x12", b"\x0a"):
        length_bytes = varints(length)
        ids_entry[:0] = [_constant(head, n), length_bytes]
        length = length + len(head) + length_bytes[1].sum(1)
    label_bytes = labels.astype("<f4").view(np.uint8).reshape(n, 4)
    value_bytes = values.astype("<f4").view(np.uint8).reshape(n, 4 * fields)
    body = ids_entry + [
        _constant(_entry_head("label", 1), n),
        (label_bytes, np.ones((n, 4), bool)),
        _constant(_entry_head("values", fields), n),
        (value_bytes, np.ones((n, 4 * fields), bool)),
    ]
    body_length = sum(mask.sum(1) for _, mask in body)
    parts = [_constant(b"\x0a", n), varints(body_length)] + body
    data = np.concatenate([np.asarray(b) for b, _ in parts], axis=1)
    mask = np.concatenate([m for _, m in parts], axis=1)
    return data[mask], mask.sum(1)


def encode_records(records):
    """Serialized records (bytes) -> (bytes uint8[total], lengths int64[n])."""
    lengths = np.fromiter(map(len, records), np.int64, len(records))
    return np.frombuffer(b"".join(records), np.uint8), lengths


def gather(data, lengths, order):
    """The records of (data, lengths) in the given order -> (data, lengths): one copy of each record's slice."""
    ends = np.cumsum(lengths)
    view = memoryview(np.ascontiguousarray(data))
    joined = b"".join([view[a:b] for a, b in zip((ends - lengths)[order].tolist(), ends[order].tolist())])
    return np.frombuffer(joined, np.uint8), lengths[order]


def frame(data, lengths, crc32c):
    """Records -> TFRecord framing, all in one buffer: uint64 length, uint32 masked crc32c(length), data, uint32
    masked crc32c(data) per record -> (bytes uint8[total], framed lengths int64[n])."""
    n = len(lengths)
    blob = data.tobytes()
    ends = np.cumsum(lengths)
    crcs = np.fromiter((crc32c(blob[a:b]) for a, b in zip((ends - lengths).tolist(), ends.tolist())), np.uint64, n)
    sizes, inverse = np.unique(lengths, return_inverse=True)
    size_crcs = np.array([masked_crc(crc32c(struct.pack("<Q", int(s)))) for s in sizes], np.uint32)
    head = np.concatenate(
        [
            lengths.astype("<u8").view(np.uint8).reshape(n, 8),
            size_crcs[inverse].astype("<u4").view(np.uint8).reshape(n, 4),
        ],
        axis=1,
    )
    masked = (((crcs >> np.uint64(15)) | (crcs << np.uint64(17))) + np.uint64(MASK_DELTA)) & np.uint64(0xFFFFFFFF)
    tail = masked.astype("<u4").view(np.uint8).reshape(n, 4)
    framed = lengths + 16
    starts = np.cumsum(framed) - framed
    is_data = np.ones(int(framed.sum()), bool)
    is_data[(starts[:, None] + np.arange(12)).reshape(-1)] = False
    is_data[((starts + 12 + lengths)[:, None] + np.arange(4)).reshape(-1)] = False
    out = np.empty(len(is_data), np.uint8)
    out[is_data] = data
    out[~is_data] = np.concatenate([head, tail], axis=1).reshape(-1)
    return out, framed
