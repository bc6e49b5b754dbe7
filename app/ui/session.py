"""The status page's browser session: a signed cookie that never holds the API key.

The key is typed once into the login form. The cookie then carries the key's id, a
fingerprint of its stored hash (:func:`atlas_jobs._app.apikeys.key_fingerprint`) and a random CSRF
token, signed with the service's secret (:func:`atlas_jobs._app.signing.load_secret`, another salt
than download links) and timestamped: it is refused after ``ui_session_ttl_seconds``.
Every request re-checks the key in ``api_keys``, so revoking the key ends its sessions.
The cookie is ``HttpOnly`` (scripts cannot read it), ``SameSite=Strict`` (no other site
makes the browser send it), ``Path=/ui`` and ``Secure`` on https (or when configured).
"""

from __future__ import annotations

import secrets
import uuid
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeTimedSerializer

COOKIE_NAME = "atlas_ui_session"
COOKIE_PATH = "/ui"
_SALT = "atlas-jobs.ui-session.v1"


@dataclass(frozen=True, slots=True)
class Session:
    """What a verified session cookie says: which key, and the form token of this login."""

    key_id: uuid.UUID
    fingerprint: str
    csrf_token: str


def new_session(key_id: uuid.UUID, fingerprint: str) -> Session:
    return Session(key_id, fingerprint, secrets.token_urlsafe(32))


class SessionCodec:
    """Signs sessions into cookie values and verifies them (bounded lifetime)."""

    def __init__(self, secret: str, *, ttl_seconds: int) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt=_SALT)
        self.ttl_seconds = ttl_seconds

    def encode(self, session: Session) -> str:
        return self._serializer.dumps(
            [str(session.key_id), session.fingerprint, session.csrf_token]
        )

    def decode(self, value: str | None) -> Session | None:
        """The session, or ``None`` for a missing, tampered, malformed or expired cookie."""
        if not value:
            return None
        try:
            key_id, fingerprint, csrf_token = self._serializer.loads(
                value, max_age=self.ttl_seconds
            )
            return Session(uuid.UUID(str(key_id)), str(fingerprint), str(csrf_token))
        except (BadSignature, TypeError, ValueError):
            return None
