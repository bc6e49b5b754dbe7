"""The small, typed tree of errors job code raises, and the engine's own stop signals.

Job code chooses between two outcomes only:

* :class:`RecoverableError` -- try again later (backoff, bounded by the kind's budget);
* :class:`PermanentError` -- the job cannot succeed; it fails with this error.

Any other exception is treated as recoverable: a bug or a flaky dependency should not
fail a job for good on its first occurrence, and the retry budget bounds the cost.
"""

from __future__ import annotations

from typing import Any

from atlas_jobs._app.transitions import error_doc


class JobError(Exception):
    """An error raised by job code, with a stable machine-readable ``code``."""

    retryable: bool = True

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message

    def as_doc(self) -> dict[str, Any]:
        """The ``{code, message, retryable}`` error object stored on the job."""
        return error_doc(self.code, self.message, retryable=self.retryable)


class RecoverableError(JobError):
    """Worth another attempt after a backoff (a transient failure)."""

    retryable = True


class PermanentError(JobError):
    """Retrying cannot help (invalid input, a step that cannot succeed): fail the job."""

    retryable = False


def describe_unknown(exc: BaseException) -> dict[str, Any]:
    """An unknown exception as a recoverable error document.

    Only the exception's class name is stored: its message may quote job input.
    """
    return error_doc(
        "unexpected_error", f"unexpected {type(exc).__name__} in job code", retryable=True
    )


class StopJob(Exception):  # noqa: N818 - a control-flow signal, not an error
    """Raised inside job code at a safe point; the engine turns it into a transition."""


class CancelStop(StopJob):
    """A cancel request was seen at a safe point: resolve to ``canceled``."""


class ReleaseStop(StopJob):
    """The worker is shutting down: hand the job back (``release``)."""


class LeaseLost(StopJob):
    """A fenced write matched no row (or the heartbeat lost the lease): write nothing more."""


class UnreconciledError(JobError):
    """An external operation's outcome stayed unknown after its reconciliation budget:
    the job goes ``unresolved`` (reason ``unreconciled``) with the evidence, and an
    operator decides (``resume`` reconciles again before anything is repeated)."""

    retryable = True

    def __init__(self, message: str, *, evidence: dict[str, Any]) -> None:
        super().__init__("unreconciled", message)
        self.evidence = evidence

    def as_doc(self) -> dict[str, Any]:
        return error_doc(self.code, self.message, retryable=True, evidence=self.evidence)


class WaitStop(StopJob):
    """The job reached a business wait (a review gate, an external confirmation):
    ``running -> waiting`` with ``reason``, a deadline and its rule."""

    def __init__(self, reason: str, *, deadline_seconds: float, on_deadline: str) -> None:
        super().__init__(reason)
        self.reason = reason
        self.deadline_seconds = deadline_seconds
        self.on_deadline = on_deadline
