"""Ctrl-C or SIGTERM during a local Spark application (`dfm data prepare --local`): its jobs are cancelled from a
thread of their own (never inside the py4j call the main thread is waiting in, where pyspark's own SIGINT handler
breaks the connection and prints its tracebacks), and whatever the cancelled application raises is replaced by one
line; the exit code is 128 + the signal's number, as a shell reports a command a signal ended (130, 143).
"""

from __future__ import annotations

import signal
import threading

from launcher.errors import DfmError

SIGNALS = (signal.SIGINT, signal.SIGTERM)


class SparkInterruption:
    """`with SparkInterruption(kept) as guard:` ... `guard.watch(spark)` once the session exists; a signal then ends
    the block with DfmError("interrupted (SIGINT): <kept>", 130). `kept` says what the user still has."""

    def __init__(self, kept: str):
        self.kept = kept
        self.signum: int | None = None
        self.spark = None
        self._done = threading.Event()
        self._previous: dict = {}

    def __enter__(self) -> "SparkInterruption":
        self._take_signals()
        return self

    def _take_signals(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in SIGNALS:
            previous = signal.signal(sig, self._on_signal)
            self._previous.setdefault(sig, previous)

    def watch(self, spark) -> None:
        """The session's jobs are the ones to cancel; SIGINT is taken back from the SparkContext (which installs a
        handler of its own as it starts)."""
        self.spark = spark
        self._take_signals()
        if self.signum is not None:
            self._start_cancelling()
        self.check()

    def check(self) -> None:
        """Between the application's steps: end now if a signal came."""
        if self.signum is not None:
            raise self.error()

    def error(self) -> DfmError:
        name = signal.Signals(self.signum).name
        return DfmError(f"interrupted ({name}): {self.kept}", 128 + self.signum)

    def _on_signal(self, signum, _frame) -> None:
        if self.signum is not None:  # already stopping
            return
        self.signum = signum
        if self.spark is not None:
            self._start_cancelling()

    def _start_cancelling(self) -> None:
        threading.Thread(target=self._cancel, name="cancel-spark-jobs", daemon=True).start()

    def _cancel(self) -> None:
        # cancelAllJobs ends the running jobs only: the application may start its next one before it sees why
        while not self._done.is_set():
            try:
                context = self.spark.sparkContext
                context.setLogLevel("OFF")  # the tasks being cancelled log their ends: echoes of the interruption
                context.cancelAllJobs()
            except Exception:  # noqa: BLE001 (the session has ended: nothing left to cancel)
                return
            self._done.wait(0.5)

    def __exit__(self, kind, value, traceback) -> None:
        self._done.set()
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        if self.signum is not None:  # whatever the cancelled jobs raised (or nothing), the interruption is the cause
            raise self.error() from None
