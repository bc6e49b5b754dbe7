"""Where the client looks for the API unless told (``--url`` / ``ATLAS_URL``): the
address ``atlas-jobs serve`` binds by default."""

from __future__ import annotations

from typing import Final

DEFAULT_URL: Final = "http://127.0.0.1:8000"
