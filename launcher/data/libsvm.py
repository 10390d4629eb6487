"""libsvm text (`label id:value id:value ...`, one pair per field in field order) -> TFRecord.

Every row must carry exactly `field_size` pairs: the seed's converter wrote ragged rows silently, and
a ragged row only fails much later, inside a training job's parse op. Rows are checked one by one and
each bad row is reported with its file and line number. Blank lines are skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from launcher.data.prepare_app import parse_libsvm

_BATCH = 4096


@dataclass(frozen=True)
class BadRow:
    path: Path
    line: int
    reason: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.reason}"


@dataclass
class ConvertReport:
    rows: int = 0  # rows written
    bad: int = 0
    first_bad: list[BadRow] = field(default_factory=list)
    outputs: list[Path] = field(default_factory=list)
    counts: list[int] = field(default_factory=list)  # records per output file


# One libsvm row -> (label, ids, values), a ValueError with a short reason when it is malformed: the same
# parser the Spark application of `dfm data prepare` runs (standalone there, so it is defined there).
parse_row = parse_libsvm


def _rows(paths: Iterable[Path], field_size: int, feature_size: int | None, report: ConvertReport,
          keep_bad: int, on_bytes: Callable[[int], None]) -> Iterator[tuple[float, list[int], list[float]]]:
    for path in paths:
        with open(path, encoding="utf-8", errors="replace") as lines:
            for number, text in enumerate(lines, start=1):
                on_bytes(len(text))
                if not text.strip():
                    continue
                try:
                    yield parse_row(text, field_size, feature_size)
                except ValueError as err:
                    report.bad += 1
                    if len(report.first_bad) < keep_bad:
                        report.first_bad.append(BadRow(path, number, str(err)))


def convert(paths: list[Path], out_dir: Path, field_size: int, files: int = 1, prefix: str = "part",
            feature_size: int | None = None, skip_bad: bool = False, keep_bad: int = 5,
            on_bytes: Callable[[int], None] = lambda n: None) -> ConvertReport:
    """Convert libsvm files into `files` TFRecord files, rows dealt round-robin (counts differ by at
    most one). With bad rows and not `skip_bad`, the outputs are removed again: nothing half-written
    stays behind. The caller decides how to report `report.bad`."""
    from launcher.data.tfrecord import quiet_tensorflow, serialize_examples

    tf = quiet_tensorflow()
    out_dir.mkdir(parents=True, exist_ok=True)
    report = ConvertReport(outputs=[out_dir / f"{prefix}-{i:05d}.tfrecord" for i in range(files)],
                           counts=[0] * files)
    writers = [tf.io.TFRecordWriter(str(path)) for path in report.outputs]
    try:
        batch: list[tuple[float, list[int], list[float]]] = []

        def flush() -> None:
            labels = np.asarray([row[0] for row in batch], dtype=np.float32)
            ids = np.asarray([row[1] for row in batch], dtype=np.int64)
            values = np.asarray([row[2] for row in batch], dtype=np.float32)
            for record in serialize_examples(labels, ids, values):
                target = report.rows % files
                writers[target].write(record)
                report.counts[target] += 1
                report.rows += 1
            batch.clear()

        for row in _rows(paths, field_size, feature_size, report, keep_bad, on_bytes):
            batch.append(row)
            if len(batch) == _BATCH:
                flush()
        if batch:
            flush()
    finally:
        for writer in writers:
            writer.close()
    if report.bad and not skip_bad:
        for path in report.outputs:
            path.unlink(missing_ok=True)
    return report
