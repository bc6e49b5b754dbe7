"""The roles an API key may hold (a module of its own, so the console command can name
them without loading the key store)."""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    """What a key may do beyond acting on its owner's own jobs."""

    CLIENT = "client"
    REVIEWER = "reviewer"
    OPERATOR = "operator"
