"""Job ids are UUIDv7 (``atlas_jobs._app.ids.new_id``): version 7, the RFC 9562 variant, and the
Unix time in milliseconds in the first 48 bits, so ids made later sort later."""

from __future__ import annotations

import time
import uuid

from atlas_jobs._app.ids import new_id


def _millis(value: uuid.UUID) -> int:
    return value.int >> 80


def test_new_id_is_a_standard_uuid_of_version_7_and_the_rfc_variant() -> None:
    made = new_id()
    assert type(made) is uuid.UUID  # what asyncpg and the API models take as they are
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert len({new_id() for _ in range(1000)}) == 1000


def test_new_id_carries_the_creation_millisecond_and_sorts_by_it() -> None:
    before = time.time_ns() // 1_000_000
    first = new_id()
    after = time.time_ns() // 1_000_000
    assert before <= _millis(first) <= after

    later = []
    for _ in range(3):
        time.sleep(0.002)  # the next millisecond at least
        later.append(new_id())
    made = [first, *later]
    assert made == sorted(made)  # as uuid values, the way PostgreSQL orders them
    assert [str(m) for m in made] == sorted(str(m) for m in made)
    assert len({_millis(m) for m in made}) == len(made)
