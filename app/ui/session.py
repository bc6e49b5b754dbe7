"""The status page's browser session: a server-side row, named by a signed cookie that
never holds the API key.

The key is typed once into the login form. The login stores a session row
(``ui_sessions``: the SHA-256 of a random token, the key's id, an expiry
``ui_session_ttl_seconds`` ahead; :func:`atlas_jobs._app.services.ui_sessions.log_in`).
The cookie carries that token and a random CSRF token, signed with the service's secret
(:func:`atlas_jobs._app.signing.load_secret`, another salt than download links) and timestamped.
Every request checks the row and its key in one statement
(:func:`atlas_jobs._app.services.ui_sessions.session_principal`): logging out deletes the
row, and so do revoking the key and an operator's "log out everywhere"
(``POST /v1/ui-sessions:end``, ``atlas-jobs keys end-sessions``) -- the same cookie is
refused at its next request, not at its expiry. The cookie is ``HttpOnly`` (scripts cannot read it),
``SameSite=Strict`` (no other site makes the browser send it), ``Path=/ui`` and
``Secure`` on https (or when configured).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

COOKIE_NAME = "atlas_ui_session"
COOKIE_PATH = "/ui"
_SALT = "atlas-jobs.ui-session.v2"
"""v2: the cookie names a server-side session (v1 cookies, without one, are refused)."""


@dataclass(frozen=True, slots=True)
class Session:
    """What a verified session cookie says: which session row, and the form token of
    this login."""

    token: str
    csrf_token: str


def new_session(token: str) -> Session:
    return Session(token, secrets.token_urlsafe(32))


class SessionCodec:
    """Signs sessions into cookie values and verifies them (bounded lifetime)."""

    def __init__(self, secret: str, *, ttl_seconds: int) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt=_SALT)
        self.ttl_seconds = ttl_seconds

    def encode(self, session: Session) -> str:
        return self._serializer.dumps([session.token, session.csrf_token])

    def decode(self, value: str | None) -> Session | None:
        """The session, or ``None`` for a missing, tampered, malformed or expired cookie."""
        if not value:
            return None
        try:
            token, csrf_token = self._serializer.loads(value, max_age=self.ttl_seconds)
            if not isinstance(token, str) or not isinstance(csrf_token, str):
                return None
            return Session(token, csrf_token)
        except (BadSignature, TypeError, ValueError):
            return None
