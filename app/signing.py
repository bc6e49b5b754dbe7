"""Signed, expiring download URLs for published result files.

The token *is* the credential for a download (it can be handed to a browser or
``curl`` without the API key), so it is bound to the job, its owner, one file name and
the API key that asked for it -- revoking that key revokes its links -- and it expires
(``ATLAS_DOWNLOAD_URL_TTL_SECONDS``, the signer's own wall-clock lifetime: a property of
the token, never compared with a job's stored times). The secret comes from
``ATLAS_SIGNING_SECRET`` or is generated once under ``ATLAS_DATA_DIR`` so that every API
process sharing the data directory accepts the others' URLs. Tokens are never logged.
"""

from __future__ import annotations

import os
import secrets
import uuid
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, SignatureExpired, URLSafeTimedSerializer

from atlas_jobs._app.settings import Settings

_SALT = "atlas-jobs.download.v1"
SECRET_FILE_NAME = "signing-secret"  # noqa: S105 - a file name, not a secret # nosec B105


class InvalidDownloadTokenError(Exception):
    """The token is malformed, tampered with, or signed with another secret."""


class ExpiredDownloadTokenError(InvalidDownloadTokenError):
    """The token was genuine but its lifetime passed."""


@dataclass(frozen=True, slots=True)
class DownloadGrant:
    """What a verified token allows: one file of one owner's job, while the key that
    asked for it is not revoked."""

    job_id: uuid.UUID
    owner: str
    name: str
    key_id: uuid.UUID


class DownloadSigner:
    def __init__(self, secret: str, *, ttl_seconds: int) -> None:
        self._serializer = URLSafeTimedSerializer(secret, salt=_SALT)
        self.ttl_seconds = ttl_seconds

    def sign(self, grant: DownloadGrant) -> str:
        return self._serializer.dumps(
            [str(grant.job_id), grant.owner, grant.name, str(grant.key_id)]
        )

    def verify(self, token: str) -> DownloadGrant:
        try:
            payload = self._serializer.loads(token, max_age=self.ttl_seconds)
        except SignatureExpired as exc:
            raise ExpiredDownloadTokenError("download link expired") from exc
        except BadSignature as exc:
            raise InvalidDownloadTokenError("bad download signature") from exc
        try:
            job_id, owner, name, key_id = payload
            return DownloadGrant(uuid.UUID(job_id), str(owner), str(name), uuid.UUID(key_id))
        except (TypeError, ValueError) as exc:
            raise InvalidDownloadTokenError("malformed download token") from exc


def load_secret(settings: Settings) -> str:
    """The configured secret, or one generated (mode 0600) under the data directory."""
    if settings.signing_secret:
        return settings.signing_secret
    path: Path = settings.data_dir / SECRET_FILE_NAME
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        # Write a private temp file, then hard-link it into place: the link fails if
        # another process got there first, and nobody ever reads a half-written secret.
        temporary = path.with_name(f".{SECRET_FILE_NAME}.{uuid.uuid4().hex}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as handle:
            handle.write(secrets.token_urlsafe(48))
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
        finally:
            temporary.unlink()
    return path.read_text().strip()


def signer_from_settings(settings: Settings) -> DownloadSigner:
    return DownloadSigner(load_secret(settings), ttl_seconds=settings.download_url_ttl_seconds)
