"""The errors a handler raises to say how its attempt ends.

* :class:`TransientError` -- worth another attempt after a backoff (the kind's
  :class:`~atlas_jobs.RetryPolicy` bounds how many and for how long);
* :class:`PermanentError` -- retrying cannot help: the job fails with this error.

Both carry a ``code`` (a lower_snake_case reason the history and the status keep) and a
``message`` for people; neither should quote confidential input. Any other exception is
classified by the kind's retry policy (``transient`` / ``permanent``), transient when
listed nowhere. :class:`LeaseLost` is raised *to* a handler: the attempt no longer holds
the job; let it propagate.
"""

from __future__ import annotations

from atlas_jobs._workers.errors import LeaseLost, PermanentError, RecoverableError

TransientError = RecoverableError
"""A failure worth another attempt (``RecoverableError`` inside the engine)."""

__all__ = ["LeaseLost", "PermanentError", "TransientError"]
