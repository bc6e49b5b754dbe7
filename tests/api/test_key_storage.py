"""API keys are stored hashed: the database holds the SHA-256 of a key and a short
prefix, never the key; a holder is stored trimmed."""

from __future__ import annotations

import hashlib

import pytest
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import SHOWN_PREFIX_LENGTH, Role, create_key
from atlas_jobs._app.db.schema import api_keys


async def test_the_database_never_holds_the_key(engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="zoe", roles=[Role.CLIENT], holder="  Zoe  ")
        row = (await conn.execute(select(api_keys).where(api_keys.c.owner == "zoe"))).one()
    assert row.key_hash == hashlib.sha256(key.encode()).hexdigest()
    assert row.prefix == key[:SHOWN_PREFIX_LENGTH]
    assert all(key not in str(value) for value in row)
    assert row.holder == "Zoe"
    async with engine.begin() as conn:
        with pytest.raises(ValueError, match="holder must be"):
            await create_key(conn, owner="zoe", roles=[Role.CLIENT], holder="   ")
