"""Draw a generator's rows once and write them into train/eval parts of equal-size files, chunk by chunk.

Formats: `tfrecord` and `libsvm` (pre-indexed id:value pairs) or `criteo-tsv` (raw text, see `raw`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from launcher.data import synth, synth_files
from launcher.data.synth import Generator


def _encoder(generator: Generator, fmt: str) -> tuple[str, Callable[[Path], object], Callable]:
    """fmt -> (file suffix, opener, encode(draw, labels) -> records to write)."""
    if fmt == "tfrecord":
        from launcher.data.tfrecord import quiet_tensorflow, serialize_examples

        tf = quiet_tensorflow()
        return (
            ".tfrecord",
            lambda path: tf.io.TFRecordWriter(str(path)),
            lambda draw, labels: serialize_examples(labels, draw.ids, draw.values),
        )
    if fmt == "libsvm":
        return (
            ".libsvm",
            lambda path: open(path, "w"),
            lambda draw, labels: synth_files.libsvm_lines(labels, draw.ids, draw.values),
        )
    if fmt == "criteo-tsv":
        from launcher.data.raw import Renderer

        renderer = Renderer(generator)
        return ".tsv", lambda path: open(path, "wb"), lambda draw, labels: [renderer.render(draw, labels)]
    raise ValueError(f"unknown format {fmt!r}; use tfrecord, libsvm or criteo-tsv")


def write_parts(
    generator: Generator,
    parts: list[tuple[Path, int, int]],
    fmt: str = "tfrecord",
    prefix: str = "part",
    on_rows: Callable[[int], None] = lambda n: None,
) -> list[tuple[float, float]]:
    """Draw the rows of all `parts` [(out_dir, rows, files)] as one sequence, chunk by chunk, and write
    each part's rows in order into its equal-size files. -> (teacher AUC, positive rate) per part.

    Memory stays at one chunk plus a label and a probability per row (for the AUC)."""
    suffix, opener, encode = _encoder(generator, fmt)
    targets = []  # (part index, path, rows) in writing order
    for index, (out_dir, rows, files) in enumerate(parts):
        per_file = synth_files.check_files(rows, files)
        Path(out_dir).mkdir(parents=True, exist_ok=True)
        targets += [(index, path, per_file) for path in synth_files.file_names(Path(out_dir), files, prefix, suffix)]
    seen = [([], []) for _ in parts]
    pending = iter(targets)
    current, left, writer = None, 0, None
    for draw, labels, probs in generator.draws(sum(rows for _, rows, _ in parts)):
        offset = 0
        while offset < len(labels):
            if left == 0:
                if writer is not None:
                    writer.close()
                current, path, left = next(pending)
                writer = opener(path)
            take = slice(offset, offset + min(left, len(labels) - offset))
            for item in encode(draw.slice(take), labels[take]):
                writer.write(item)
            seen[current][0].append(labels[take])
            seen[current][1].append(probs[take])
            left -= take.stop - take.start
            offset = take.stop
        on_rows(len(labels))
    if writer is not None:
        writer.close()
    results = []
    for labels, probs in seen:
        labels, probs = np.concatenate(labels), np.concatenate(probs)
        results.append((synth.roc_auc(labels, probs), float(labels.mean())))
    return results
