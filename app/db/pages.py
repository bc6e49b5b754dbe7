"""How many rows a keyset page asks the database for: one beyond the page, so the
caller knows whether another follows (:mod:`atlas_jobs._app.services.paging` shows the
page and names the next cursor)."""

from __future__ import annotations


def fetch_size(limit: int) -> int:
    """Rows to fetch for a page of ``limit``: one more tells whether another follows."""
    return limit + 1
