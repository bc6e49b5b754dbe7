"""Dependencies, as ``Annotated`` aliases the routers use in their signatures."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from typing import Annotated

import structlog
from fastapi import Depends, Request
from fastapi.openapi.models import HTTPBearer as HTTPBearerModel
from fastapi.security.base import SecurityBase
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from atlas_jobs._app.api.errors import ForbiddenError, InvalidRequestError, UnauthorizedError
from atlas_jobs._app.api.middleware import REQUEST_ID
from atlas_jobs._app.api.state import ApiState
from atlas_jobs._app.apikeys import Principal, Role, authenticate, hash_key, looks_like_key


# Dependencies are ``async def`` even when they await nothing: FastAPI runs a plain
# ``def`` dependency in its thread pool, a thread hop per request for a field access.
async def get_state(request: Request) -> ApiState:
    return api_state(request)


def api_state(request: Request) -> ApiState:
    """The process's :class:`ApiState`. The hottest routes (create, status read) take it
    from their ``Request`` rather than through :data:`StateDep`: FastAPI solves each
    dependency anew on every request (a few percent of a status read)."""
    state: ApiState = request.app.state.atlas
    return state


StateDep = Annotated[ApiState, Depends(get_state)]


async def get_engine(state: StateDep) -> AsyncEngine:
    return state.engine


EngineDep = Annotated[AsyncEngine, Depends(get_engine)]


async def get_read_connection(engine: EngineDep) -> AsyncIterator[AsyncConnection]:
    """A connection for reads (autocommit-free; nothing is written through it)."""
    async with engine.connect() as conn:
        yield conn


ConnDep = Annotated[AsyncConnection, Depends(get_read_connection)]


_BEARER_DESCRIPTION = "An API key: `Authorization: Bearer atlas_...`"


class ApiKeyBearer(SecurityBase):
    """The API key of a request: ``Authorization: Bearer <key>`` in, a :class:`Principal`
    out (401 otherwise), in ONE dependency. The OpenAPI document shows FastAPI's
    ``HTTPBearer`` scheme, under its name. FastAPI solves every sub-dependency of a
    route on every request, even one it has cached, so an ``HTTPBearer`` and the state
    beneath the authentication cost two more solves per request."""

    def __init__(self) -> None:
        self.model = HTTPBearerModel(description=_BEARER_DESCRIPTION)
        self.scheme_name = "HTTPBearer"

    async def __call__(self, request: Request) -> Principal:
        # HTTPBearer's parsing (fastapi.security.http), then the lookup.
        scheme, _, key = (request.headers.get("authorization") or "").partition(" ")
        key = key.strip()
        if not (scheme and key) or scheme.lower() != "bearer":
            raise UnauthorizedError("Send Authorization: Bearer <api key>")
        state = api_state(request)
        digest = hash_key(key) if looks_like_key(key) else None
        # A recent successful lookup of the same key answers without the database
        # (atlas_jobs._app.api.keycache: a revocation takes effect within api_key_cache_seconds).
        principal = None if digest is None else state.keys.get(digest)
        if principal is None:
            async with state.reads.connect() as conn:  # one statement: no BEGIN/ROLLBACK
                principal = await authenticate(conn, key)
            if principal is not None and digest is not None:
                state.keys.put(digest, principal)
        if principal is None:
            raise UnauthorizedError("Unknown or revoked API key")
        structlog.contextvars.bind_contextvars(owner=principal.owner)
        return principal


get_principal = ApiKeyBearer()

CurrentPrincipal = Annotated[Principal, Depends(get_principal)]


def require(role: Role) -> object:
    async def check(principal: CurrentPrincipal) -> Principal:
        if not principal.has(role):
            raise ForbiddenError(f"This action needs the {role.value} role")
        return principal

    return Depends(check)


OperatorPrincipal = Annotated[Principal, require(Role.OPERATOR)]
ReviewerPrincipal = Annotated[Principal, require(Role.REVIEWER)]


def request_id() -> str | None:
    """The id of the request being served (``X-Request-ID``), recorded with its moves."""
    return REQUEST_ID.get()


def bind_job(job_id: uuid.UUID) -> None:
    structlog.contextvars.bind_contextvars(job_id=str(job_id))


async def reject_null_body(request: Request) -> None:
    """An optional body is an object or absent: a JSON ``null`` is 422, as the schema says
    (the schema leaves null out so generated clients can omit the body)."""
    if (await request.body()).strip() == b"null":
        raise InvalidRequestError(
            "The body is optional, but when sent it is an object",
            errors=[{"loc": ["body"], "msg": "null is not an object", "type": "null_body"}],
        )


NoNullBody = Depends(reject_null_body)
