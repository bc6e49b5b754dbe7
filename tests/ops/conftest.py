"""Fixtures of the operations tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from tests.support import Server


@pytest.fixture
async def empty_database(pg_server: Server) -> AsyncIterator[str]:
    """A new database with nothing in it (not migrated), dropped afterwards."""
    name = f"atlas_empty_{uuid.uuid4().hex[:8]}"
    url = await pg_server.create_database(name)
    yield url
    await pg_server.drop_database(name)
