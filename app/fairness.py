"""Which queued job starts next: priority, fair share across owners, concurrency keys.

* **Priority** -- an integer from :data:`MIN_PRIORITY` to :data:`MAX_PRIORITY`
  (:data:`DEFAULT_PRIORITY` when the create body names none); a higher one starts first
  among the queued jobs of one *lane*, FIFO within a priority.
* **Lanes and fair share** -- a lane is an owner's queued jobs of one ``kind@version``
  and concurrency key. Each claim takes lanes least-served first and advances every lane
  it visited by the jobs it took, divided by the owner's share (default
  :data:`DEFAULT_SHARE`, set by operators): a weighted round robin, so one owner's large
  backlog delays another owner's job by about one claim batch, not by the backlog.
* **Concurrency keys** -- a kind may declare one (:class:`atlas_jobs.Concurrency`): at
  most ``limit`` jobs of a key run at once across every worker, and optionally at most
  ``rate`` start per ``per`` seconds. A kind that allows it lets a job name its own key
  (``concurrency_key`` in the create body), scoped under the kind's key.

This module is pure: the SQL lives in :mod:`atlas_jobs._app.db.queries` (the claim) and
the schema's triggers (``app/db/sql/functions.sql``).
"""

from __future__ import annotations

import re
from typing import Final

MIN_PRIORITY: Final = 0
MAX_PRIORITY: Final = 9
DEFAULT_PRIORITY: Final = 4
"""The priority of a job whose create body names none: the middle of the range, so a
client can go either way."""

DEFAULT_SHARE: Final = 1
MAX_SHARE: Final = 1000
"""An owner's share is an integer weight from 1 to this."""

JOB_KEY_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,99}$"
"""A concurrency key a job names (where its kind allows): 1-100 characters, no spaces."""

MAX_KEY_LIMIT: Final = 100_000
"""The largest concurrency limit (jobs running at once per key) an operator may set."""

MAX_RATE: Final = 1_000_000
MAX_PERIOD_SECONDS: Final = 86_400.0


def job_key(declared: str, named: str | None) -> str:
    """The stored concurrency key of a job: its kind's ``declared`` key, or -- when the job
    names one (``named``, where the kind allows it) -- that key under the kind's, so a
    client can never take room in another kind's keys."""
    return declared if named is None else f"{declared}/{named}"


def valid_job_key(named: str) -> bool:
    return re.fullmatch(JOB_KEY_PATTERN, named) is not None
