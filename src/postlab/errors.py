"""The one exception type the command line turns into a one-line message and exit code 2."""


class UserError(Exception):
    """Bad input from the user: a path, a file's contents, an option.

    Raised anywhere below the CLI; the CLI prints ``postlab: <message>`` and exits 2 without a
    traceback, because the fix is in the user's hands, not in the code.
    """


class RecordDoesNotFit(UserError):
    """A record whose seeds do not fit its plan (a hand-made or partial record): its counts
    can still be shown, but not the analysis a report's findings need."""


class RunFailed(Exception):
    """Training stopped (non-finite values, a dead worker, a checkpoint that re-evaluates
    differently); completed seeds are kept."""


class NonFiniteError(RuntimeError):
    """A loss or gradient norm became NaN or infinite; the run cannot continue honestly."""
