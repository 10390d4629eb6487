"""Raw Criteo-layout text from the synthetic generator: the teacher's rows as the click log they came from.

One row per line, tab-separated, no header: the label (0/1), one integer column per numeric field (the
count behind its log2 bucket), one 8-hex-digit column per categorical field and, optionally, a
multi-hot column (8-hex-digit tokens joined by "|"). An empty cell is a missing value.

Each column is a bijection of what the teacher saw: a count determines its bucket and value
(`synth_rows.numeric_features`); a categorical id is a field-local id put through a keyed 32-bit permutation
(murmur3's finalizer), so two ids of one field never share a string; bag tokens likewise with their
own key. So the label of every raw row is the teacher's label for exactly these cells.

Rendering is vectorised: every column becomes a fixed-width block of ASCII bytes with NUL padding, the
blocks and separators are laid side by side, and dropping the NULs leaves the text.
"""

from __future__ import annotations

import numpy as np

from launcher.data.synth import Generator
from launcher.data.synth_rows import Draw

LABEL = "clicked"
SEPARATOR = "|"
_KEY_STREAM = 7  # the per-column hash keys: a stream of their own, apart from synth's
_HEX = np.frombuffer(b"0123456789abcdef", dtype=np.uint8)
_TAB, _NEWLINE, _BAR = ord("\t"), ord("\n"), ord(SEPARATOR)


def column_names(numeric_fields: int, categorical_fields: int, multi_hot: str | None = None) -> list[str]:
    """Criteo's names: the label, i1..iN (counts), c1..cM (categoricals), then the multi-hot column."""
    names = [LABEL] + [f"i{k + 1}" for k in range(numeric_fields)] + [f"c{k + 1}" for k in range(categorical_fields)]
    return names + ([multi_hot] if multi_hot else [])


def permute32(values: np.ndarray, key: int) -> np.ndarray:
    """A keyed bijection of uint32: add the key, then murmur3's fmix32 (each step is invertible)."""
    h = (np.asarray(values, dtype=np.uint64) + np.uint64(key)).astype(np.uint32)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


class Renderer:
    """Turns a generator's draws into raw text; the hash keys depend on the generator's seed only."""

    def __init__(self, generator: Generator):
        self.layout = generator.layout
        self.multi_hot = generator.sampler.multi_hot
        keys = np.random.default_rng(np.random.SeedSequence([generator.seed, _KEY_STREAM]))
        self.keys = keys.integers(0, 2**32, len(self.layout.sizes) + 1, dtype=np.uint64).tolist()

    def codes(self, field: int, ids: np.ndarray) -> np.ndarray:
        """The 32-bit codes (printed as 8 hex digits) of a categorical field's global ids."""
        return permute32(np.asarray(ids) - self.layout.offsets[field], self.keys[field])

    def bag_codes(self, bag_ids: np.ndarray) -> np.ndarray:
        return permute32(bag_ids, self.keys[-1])

    def render(self, draw: Draw, labels: np.ndarray) -> bytes:
        rows, numeric = len(draw), self.layout.numeric_fields
        missing = draw.missing if draw.missing is not None else np.zeros(draw.ids.shape, dtype=bool)
        blocks = [(np.asarray(labels) > 0.5).astype(np.uint8)[:, None] + np.uint8(ord("0"))]
        for f in range(numeric):
            blocks.append(_decimal(draw.counts[:, f], missing[:, f]))
        for f in range(numeric, len(self.layout.sizes)):
            block = _hex(self.codes(f, draw.ids[:, f]))
            block[missing[:, f]] = 0
            blocks.append(block)
        if self.multi_hot is not None:
            blocks.append(self._bag(draw))
        ends = np.full((rows, 1), _TAB, dtype=np.uint8)
        pieces = []
        for block in blocks:
            pieces += [block, ends]
        pieces[-1] = np.full((rows, 1), _NEWLINE, dtype=np.uint8)
        text = np.concatenate(pieces, axis=1)
        return text[text != 0].tobytes()

    def _bag(self, draw: Draw) -> np.ndarray:
        rows, width = draw.bag_ids.shape
        slots = np.arange(width)
        tokens = _hex(self.bag_codes(draw.bag_ids))  # [rows, width, 8]
        tokens[slots >= draw.bag_lengths[:, None]] = 0
        bars = np.where(slots < draw.bag_lengths[:, None] - 1, _BAR, 0).astype(np.uint8)
        return np.concatenate([tokens, bars[:, :, None]], axis=2).reshape(rows, width * 9)


def _decimal(values: np.ndarray, blank: np.ndarray) -> np.ndarray:
    """Non-negative int64[rows] -> uint8[rows, digits]: right-aligned ASCII, NUL-padded; blank rows all NUL."""
    width = len(str(int(values.max()))) if len(values) else 1
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    digits = ((values[:, None] // powers) % 10).astype(np.uint8) + np.uint8(ord("0"))
    significant = values[:, None] >= powers
    significant[:, -1] = True
    digits[~significant | blank[:, None]] = 0
    return digits


def _hex(codes: np.ndarray) -> np.ndarray:
    """uint32[...] -> uint8[..., 8]: eight lowercase hex digits each."""
    shifts = np.arange(28, -4, -4, dtype=np.uint32)
    return _HEX[(codes[..., None] >> shifts) & np.uint32(0xF)]
