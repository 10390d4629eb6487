"""What a parameter-server chief leaves out of its output because it reports the failure itself, in one line:
ClusterCoordinator's pages of failed-closure logs, and the tracebacks of eager executors whose remote task is gone."""

# What ClusterCoordinator logs at ERROR about failed closures, with the whole gRPC detail over dozens of
# lines: errors that join() raises next (the caller reports them once: a line of its own, or the
# traceback), errors it says it ignores, errors naming a ps (retried while transient; when not,
# join() raises them and the chief names the ps in one line), and a worker's closure failing on a connection (a ps
# gone mid-closure: the chief names the ps; a worker gone: watch_workers names it).
REPORTED_ELSEWHERE = (
    "encountered the following error when processing closure",
    "Start cancelling closures due to error",
    "derived error is ignored",
    "/job:ps/",
    "failed with UnavailableError",
)


class _ReportedElsewhere:
    def filter(self, record):
        message = record.getMessage()
        return not any(text in message for text in REPORTED_ELSEWHERE)


def report_closure_errors_once():
    import logging
    import sys

    logging.getLogger("tensorflow").addFilter(_ReportedElsewhere())
    sys.unraisablehook = quiet_lost_task_executors(sys.unraisablehook)


def quiet_lost_task_executors(previous):
    """An unraisablehook that drops what an eager Executor's __del__ raises when its remote task is gone
    (UnavailableError: Python prints it as "Exception ignored in", with a traceback and the gRPC detail, once per
    executor, before the chief's line naming the ps); anything else goes to `previous`."""

    def hook(unraisable):
        import tensorflow as tf

        lost = isinstance(unraisable.exc_value, tf.errors.UnavailableError)
        if lost and getattr(unraisable.object, "__qualname__", "") == "Executor.__del__":
            return
        previous(unraisable)

    return hook
