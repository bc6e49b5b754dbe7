"""``atlas-jobs keys``: create, list and revoke API keys (stored hashed; shown once), and
end status-page sessions ("log out everywhere")."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer

from atlas_jobs._app.roles import Role

if TYPE_CHECKING:
    from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

    from atlas_jobs._app.apikeys import KeyListing

keys_app = typer.Typer(
    help="Create, list and revoke API keys (stored hashed; shown once); end status-page sessions."
)

T = TypeVar("T")


def _with_engine(action: Callable[[AsyncEngine], Awaitable[T]]) -> T:
    """Run ``action`` against the configured (migrated) database, on a one-connection
    engine disposed afterwards."""
    import asyncio

    from atlas_jobs._app.cli.preflight import migrated_database_url
    from atlas_jobs._app.db.engine import create_engine

    url = migrated_database_url()  # unmigrated: the advice `serve` gives, not a SQL error

    async def run() -> T:
        engine = create_engine(url, pool_size=1, application_name="atlas-cli")
        try:
            return await action(engine)
        finally:
            await engine.dispose()

    return asyncio.run(run())


def _in_transaction(action: Callable[[AsyncConnection], Awaitable[T]]) -> T:
    async def in_transaction(engine: AsyncEngine) -> T:
        async with engine.begin() as conn:
            return await action(conn)

    return _with_engine(in_transaction)


@keys_app.command("create")
def create(
    owner: Annotated[str, typer.Option(help="Whose jobs the key sees.")],
    role: Annotated[
        list[Role] | None,
        typer.Option(help="client, reviewer or operator; repeat for several."),
    ] = None,
    holder: Annotated[
        str | None,
        typer.Option(
            help="Who holds the key (a person or a system); the four-eyes rule of reviews "
            "compares holders, whichever of their keys they use."
        ),
    ] = None,
    kind: Annotated[
        list[str] | None,
        typer.Option(
            "--kind",
            help="Operators: the kinds this key may act on in bulk operations (repeatable; "
            "default: every kind). Jobs of other kinds are skipped, never touched.",
        ),
    ] = None,
) -> None:
    """Create a key and print it once. Only its SHA-256 hash is stored."""
    from atlas_jobs._app.apikeys import create_key

    roles = role or [Role.CLIENT]

    async def action(conn: AsyncConnection) -> str:
        return await create_key(conn, owner=owner, roles=roles, holder=holder, kinds=kind)

    try:
        key = _in_transaction(action)
    except ValueError as exc:
        typer.echo(str(exc), err=True)
        raise typer.Exit(2) from None
    typer.echo(key)
    held = f" held by {holder.strip()!r}" if holder else ""
    typer.echo(
        f"created a key for owner {owner!r}{held} with roles {', '.join(sorted(roles))}; "
        "it is shown only now",
        err=True,
    )


@keys_app.command("list")
def list_command(
    owner: Annotated[str | None, typer.Option(help="Only this owner's keys.")] = None,
) -> None:
    """List keys by id and prefix (never the key itself)."""
    from atlas_jobs._app.apikeys import list_keys

    async def action(conn: AsyncConnection) -> list[KeyListing]:
        return list(await list_keys(conn, owner=owner))

    for listing in _in_transaction(action):
        revoked = f" revoked {listing.revoked_at:%Y-%m-%d}" if listing.revoked_at else ""
        roles = ",".join(listing.roles)
        holder = f"  holder={listing.holder}" if listing.holder else ""
        typer.echo(f"{listing.id}  {listing.prefix}…  {listing.owner}  {roles}{holder}{revoked}")


@keys_app.command("revoke")
def revoke(key_id: Annotated[uuid.UUID, typer.Argument(help="The key's id (keys list).")]) -> None:
    """Revoke a key: requests with it answer 401 from now on (an API process that
    missed the revocation notice may still accept it for ATLAS_API_KEY_CACHE_SECONDS),
    and its status-page sessions end at once."""
    from atlas_jobs._app.apikeys import revoke_key

    async def action(conn: AsyncConnection) -> bool:
        return await revoke_key(conn, key_id)

    if not _in_transaction(action):
        typer.echo("no such active key", err=True)
        raise typer.Exit(1)
    typer.echo(f"revoked {key_id}")


@keys_app.command("end-sessions")
def end_sessions_command(
    owner: Annotated[str | None, typer.Option(help="Every key of this owner's.")] = None,
    key_id: Annotated[uuid.UUID | None, typer.Option("--key", help="This key's.")] = None,
    all_sessions: Annotated[
        bool, typer.Option("--all", help="Every session of every key.")
    ] = False,
) -> None:
    """Log out everywhere: end status-page sessions at once (the keys stay valid)."""
    if owner is None and key_id is None and not all_sessions:
        typer.echo("name --owner, --key or --all", err=True)
        raise typer.Exit(2)
    from atlas_jobs._app.services.ui_sessions import end_all

    async def action(engine: AsyncEngine) -> int:
        return await end_all(engine, owner=owner, key_id=key_id)

    typer.echo(f"ended {_with_engine(action)} session(s)")
