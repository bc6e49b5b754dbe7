"""Who the caller is to the services: whose jobs it sees, and the actor its moves
record."""

from __future__ import annotations

import hmac
from collections.abc import Sequence

from atlas_jobs._app.apikeys import Principal, Role
from atlas_jobs._app.lifecycle import ActorKind, JobState, TransitionName, transition
from atlas_jobs._app.services.refusals import NotAllowed
from atlas_jobs._app.transitions import Actor


def is_operator(principal: Principal) -> bool:
    """Whether the caller acts on every owner's jobs (the operator role): the operator
    views and actions need it."""
    return principal.has(Role.OPERATOR)


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


def check_owner_filter(owners: Sequence[str], scope: str | None) -> None:
    """A search scoped to one owner (:func:`search_scope`) names no other
    (:class:`NotAllowed`: the role is missing)."""
    if scope is not None and any(owner != scope for owner in owners):
        raise NotAllowed(
            "Searching another owner's jobs needs the operator role (or a reviewer's "
            "global review scope)"
        )


def listing_owner(principal: Principal, requested: str | None) -> str:
    """Whose jobs a listing of one owner shows: the caller's own when none (or a blank)
    is asked for; another owner's for operators only (:class:`NotAllowed`)."""
    wanted = (requested or "").strip() or principal.owner
    if wanted != principal.owner and not principal.has(Role.OPERATOR):
        raise NotAllowed("Only operators list other owners' jobs")
    return wanted


_CANCELABLE = frozenset(transition(TransitionName.REQUEST_CANCEL).moves)


def may_cancel(state: JobState, principal: Principal) -> bool:
    """Whether the caller's cancel of a job in ``state`` can take effect (the page shows
    its Cancel button then): the states ``request_cancel`` moves from, and
    ``unresolved`` for an operator (whose cancel there is an operator decision)."""
    if state in _CANCELABLE:
        return True
    return state == JobState.UNRESOLVED and principal.has(Role.OPERATOR)


def actor_for(principal: Principal) -> Actor:
    """The actor of a request's moves: ``operator:<owner>`` or ``client:<owner>``."""
    kind = ActorKind.OPERATOR if principal.has(Role.OPERATOR) else ActorKind.CLIENT
    return Actor(kind, principal.owner)


def operator_actor(principal: Principal) -> Actor:
    """The actor of an operator-only action (routes that require the role): ``operator:<owner>``."""
    return Actor(ActorKind.OPERATOR, principal.owner)


def submitter(principal: Principal) -> Actor:
    """The creation's actor: ``client:<owner>``, carrying the key that submitted (the
    history row records it: the four-eyes rule of reviews)."""
    return Actor(ActorKind.CLIENT, principal.owner, key_id=principal.key_id)


def may_read_metrics(configured_token: str | None, authorization: str | None) -> bool:
    """Whether a scrape may read the metrics: always when no ``ATLAS_METRICS_TOKEN`` is
    set, else only with ``Authorization: Bearer <token>`` (compared in constant time)."""
    if configured_token is None:
        return True
    return hmac.compare_digest(
        (authorization or "").encode(), f"Bearer {configured_token}".encode()
    )
