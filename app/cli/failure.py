"""The failure every verb reports the same way: one line the user can act on."""

from __future__ import annotations


class CliFailure(Exception):  # noqa: N818 - an outcome for the user, not a program error
    """A failure the user can act on, told in one line."""
