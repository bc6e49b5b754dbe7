"""Ids of the rows this service creates: UUID version 7 (RFC 9562), time-ordered.

The first 48 bits are the Unix time in milliseconds, the rest random (74 bits) with the
version and variant bits. Ids made later sort later, so new rows append at the right edge
of a primary key instead of landing anywhere in it: at a million jobs, creation touches
one leaf page of ``pk_jobs`` and a claim of the oldest jobs one or two, where random ids
(version 4) need a working set of the whole index. The id stays opaque to clients (the
API never reads a time out of it) and unguessable enough: every job read is scoped to
its owner, another owner's id answers 404.

Attempt ids are made in SQL by the claim, the same layout: ``atlas_uuid_v7()`` (revision
``f1a2b3c4d5e6``).
"""

from __future__ import annotations

import uuid

from uuid_utils.compat import uuid7


def new_id() -> uuid.UUID:
    """A new time-ordered id (UUIDv7) as a standard-library :class:`uuid.UUID`."""
    return uuid7()
