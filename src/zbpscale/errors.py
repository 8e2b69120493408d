"""The exception tree: user mistakes are `ZbpError`s and print as one line; bugs keep their traceback."""


class ZbpError(Exception):
    """Base of every error that is the user's to fix. The CLI prints it as one line with its hint."""

    def __init__(self, message: str, *, hint: str | None = None):
        super().__init__(message)
        self.hint = hint

    def __reduce__(self):  # keep the hint across processes (pickle would drop the keyword-only argument)
        return (self.__class__, (self.args[0],), {"hint": self.hint})

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message} (hint: {self.hint})" if self.hint else message


class ConfigError(ZbpError, ValueError):
    """A config value is out of range or unknown; the message names the field and the allowed values."""


class DataError(ZbpError):
    """Data are missing, corrupt or cannot be reached; the message says what to run to fix it."""


class BrokenRunFolder(ZbpError):
    """A run folder's own files cannot be read (a garbled config.json): the run cannot go on until fixed."""


class RunFolderBusy(ZbpError):
    """Another trainer is training this run folder: a second one must not write beside it."""


class LeaseLost(RunFolderBusy):
    """Another trainer took the run folder over while this one was silent past its lease (paused, frozen in I/O):
    this one writes nothing more into it (no record, stamp, checkpoint or tracker event) and leaves."""


class CheckpointError(ZbpError):
    """A checkpoint could not be written or read; the message names the file and what is still intact."""


def report(err: BaseException) -> None:
    """The one way a user's mistake reaches the terminal: `error: <message> (hint: ...)`, one line on stderr."""
    import sys

    label = "\033[31merror:\033[0m" if sys.stderr.isatty() else "error:"
    print(f"{label} {err}", file=sys.stderr, flush=True)
