"""The one exception type the CLI turns into a one-line message and an exit code."""


class DfmError(Exception):
    """A user-facing failure: `message` is printed on one line, `exit_code` is returned.

    Exit codes: 2 for an invalid spec or usage, 1 for a failed or stopped job or an AWS refusal. Any other
    exception is a bug in dfm: the CLI prints it on one line and exits 3 (`--debug` shows the traceback).
    """

    def __init__(self, message: str, exit_code: int = 2):
        super().__init__(message)
        self.message = message
        self.exit_code = exit_code
