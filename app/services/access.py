"""Who the caller is to the services: whose jobs it sees, and the actor its moves
record."""

from __future__ import annotations

from atlas_jobs._app.apikeys import Principal, Role
from atlas_jobs._app.lifecycle import ActorKind
from atlas_jobs._app.transitions import Actor


def visible_owner(principal: Principal) -> str | None:
    """Whose jobs the caller may see: its own, or every owner's for operators."""
    return None if principal.has(Role.OPERATOR) else principal.owner


def search_scope(principal: Principal, *, review_scope: str) -> str | None:
    """Whose jobs the caller may search: every owner's for operators, and for reviewers
    when the review scope is global (``ATLAS_REVIEW_SCOPE``); otherwise its own."""
    if principal.has(Role.OPERATOR):
        return None
    if principal.has(Role.REVIEWER) and review_scope == "global":
        return None
    return principal.owner


def actor_for(principal: Principal) -> Actor:
    """The actor of a request's moves: ``operator:<owner>`` or ``client:<owner>``."""
    kind = ActorKind.OPERATOR if principal.has(Role.OPERATOR) else ActorKind.CLIENT
    return Actor(kind, principal.owner)


def submitter(principal: Principal) -> Actor:
    """The creation's actor: ``client:<owner>``, carrying the key that submitted (the
    history row records it: the four-eyes rule of reviews)."""
    return Actor(ActorKind.CLIENT, principal.owner, key_id=principal.key_id)
