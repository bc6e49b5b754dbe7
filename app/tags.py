"""Tags: the ``key=value`` labels a job is created with, to find it again.

A tag is a label, never a secret: it is shown in the status, in listings across owners
(operators, reviewers), in the status page and in logs. A job has at most
:data:`MAX_TAGS` of them, each at most :data:`MAX_TAG_LENGTH` characters: a key of
letters, digits, ``_ . -`` (starting with a letter or digit), ``=``, and a value of
printable characters. A job's tags are a set: stored sorted, a repeat is refused.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Annotated, Final

from pydantic import StringConstraints

MAX_TAGS: Final = 10
MAX_TAG_LENGTH: Final = 100
TAG_PATTERN: Final = r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,49}=[^\x00-\x1f\x7f]{1,99}$"
_TAG = re.compile(TAG_PATTERN)

Tag = Annotated[str, StringConstraints(pattern=TAG_PATTERN, max_length=MAX_TAG_LENGTH)]
"""One tag, as the request schemas validate it."""


def is_tag(candidate: str) -> bool:
    return len(candidate) <= MAX_TAG_LENGTH and _TAG.fullmatch(candidate) is not None


def normalized(tags: Iterable[str]) -> tuple[str, ...]:
    """A job's tags as stored: sorted (a set; the caller refused repeats)."""
    return tuple(sorted(tags))


def first_repeat(tags: Iterable[str]) -> int | None:
    """The index of the first tag that repeats an earlier one, else ``None``."""
    seen: set[str] = set()
    for index, tag in enumerate(tags):
        if tag in seen:
            return index
        seen.add(tag)
    return None
