"""``atlas-jobs keys``: create, list and revoke API keys (stored hashed; shown once)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from typing import Annotated, TypeVar

import typer
from sqlalchemy.ext.asyncio import AsyncConnection

from atlas_jobs._app.apikeys import KeyListing, Role, create_key, list_keys, revoke_key

keys_app = typer.Typer(help="Create and list API keys (stored hashed; shown once).")

T = TypeVar("T")


def _in_transaction(action: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    from atlas_jobs._app.db.engine import create_engine, resolve_database_url
    from atlas_jobs._app.settings import get_settings

    async def run() -> T:
        engine = create_engine(
            resolve_database_url(get_settings()), pool_size=1, application_name="atlas-cli"
        )
        try:
            async with engine.begin() as conn:
                return await action(conn)
        finally:
            await engine.dispose()

    return asyncio.run(run())


@keys_app.command("create")
def create(
    owner: Annotated[str, typer.Option(help="Whose jobs the key sees.")],
    role: Annotated[
        list[Role] | None,
        typer.Option(help="client, reviewer or operator; repeat for several."),
    ] = None,
) -> None:
    """Create a key and print it once. Only its SHA-256 hash is stored."""
    roles = role or [Role.CLIENT]

    async def action(conn: AsyncConnection) -> str:
        return await create_key(conn, owner=owner, roles=roles)

    key = _in_transaction(action)
    typer.echo(key)
    typer.echo(
        f"created a key for owner {owner!r} with roles {', '.join(sorted(roles))}; "
        "it is shown only now",
        err=True,
    )


@keys_app.command("list")
def list_command(
    owner: Annotated[str | None, typer.Option(help="Only this owner's keys.")] = None,
) -> None:
    """List keys by id and prefix (never the key itself)."""

    async def action(conn: AsyncConnection) -> list[KeyListing]:
        return list(await list_keys(conn, owner=owner))

    for listing in _in_transaction(action):
        revoked = f" revoked {listing.revoked_at:%Y-%m-%d}" if listing.revoked_at else ""
        roles = ",".join(listing.roles)
        typer.echo(f"{listing.id}  {listing.prefix}…  {listing.owner}  {roles}{revoked}")


@keys_app.command("revoke")
def revoke(key_id: Annotated[uuid.UUID, typer.Argument(help="The key's id (keys list).")]) -> None:
    """Revoke a key: requests with it answer 401 from now on (an API process that
    missed the revocation notice may still accept it for ATLAS_API_KEY_CACHE_SECONDS)."""

    async def action(conn: AsyncConnection) -> bool:
        return await revoke_key(conn, key_id)

    if not _in_transaction(action):
        typer.echo("no such active key", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")
