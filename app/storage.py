"""Result storage behind a small interface: the filesystem store (default) here, an
S3-compatible object store in :mod:`atlas_jobs._app.objectstore`; :func:`make_store` picks one by
configuration (``ATLAS_RESULT_STORE``).

Layout under ``ATLAS_DATA_DIR/results``::

    staging/<job_id>/          private: partial and staged outputs, never served
    published/<owner>/<job_id>/ owner-retrievable after the publication commit

Publication is an atomic ``rename`` of the staging directory into the owner's area,
done while the publishing transaction holds the job row lock. If that transaction
then fails to commit, the job is not ``available`` and nothing serves the files; the
next attempt's publication replaces them.

Results are private to the account running Atlas: every directory is created ``0700``
and every file ``0600``, whatever the process umask (``_private_dir`` chmods what it
creates; files are opened with their mode and ``fchmod``-ed).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from atlas_jobs._app.settings import Settings

DIR_MODE = 0o700
FILE_MODE = 0o600

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SAFE_OWNER = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,127}$")


class StorageError(Exception):
    """A storage operation could not be completed."""


@dataclass(frozen=True, slots=True)
class StoredFile:
    name: str
    size: int
    sha256: str

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "size": self.size, "sha256": self.sha256}


@dataclass(frozen=True, slots=True)
class PublishedEntry:
    """One job's directory in the published area, found by listing it (the owner part
    is the on-disk name, possibly hashed)."""

    owner_dir: str
    job_id: uuid.UUID


def safe_name(name: str) -> str:
    """A file name with no path parts; anything else is refused."""
    if not _SAFE_NAME.fullmatch(name) or name in {".", ".."}:
        raise StorageError(f"unsafe file name {name!r}")
    return name


def _private_dir(directory: Path, *, top: Path) -> None:
    """Create ``directory`` (and its missing parents up to and including ``top``) as
    ``0700``; directories that already exist below ``top`` are tightened too."""
    chain: list[Path] = []
    current = directory
    while True:
        chain.append(current)
        if current == top or current.parent == current:
            break
        current = current.parent
    for path in reversed(chain):
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=DIR_MODE, parents=path == top)
        if stat.S_IMODE(path.stat().st_mode) != DIR_MODE:
            path.chmod(DIR_MODE)


def _owner_dir_name(owner: str) -> str:
    if _SAFE_OWNER.fullmatch(owner):
        return owner
    return "h-" + hashlib.sha256(owner.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class PublishedFile:
    """One published file to hand out: a local ``path`` (served with ``sendfile``) or,
    for a remote store, ``chunks`` that read it (called in a worker thread)."""

    size: int
    path: Path | None = None
    chunks: Callable[[], Iterator[bytes]] | None = None


class ResultStore(Protocol):
    def write_staged(self, job_id: uuid.UUID, name: str, data: bytes) -> StoredFile: ...
    def staged_files(self, job_id: uuid.UUID) -> list[StoredFile]: ...
    def has_staged(self, job_id: uuid.UUID, name: str) -> bool: ...
    def read_staged(self, job_id: uuid.UUID, name: str) -> bytes: ...
    def publish(self, owner: str, job_id: uuid.UUID) -> list[StoredFile]: ...
    def published_file(self, owner: str, job_id: uuid.UUID, name: str) -> PublishedFile | None: ...
    def remove_published(self, owner: str, job_id: uuid.UUID) -> None: ...
    def remove_staging(self, job_id: uuid.UUID) -> None: ...
    def staged_job_ids(self) -> list[uuid.UUID]: ...
    def published_entries(self) -> list[PublishedEntry]: ...
    def remove_published_entry(self, entry: PublishedEntry) -> None: ...


class FilesystemStore:
    """:class:`ResultStore` on a local (or shared) filesystem."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._staging = root / "staging"
        self._published = root / "published"

    def _staging_dir(self, job_id: uuid.UUID) -> Path:
        return self._staging / str(job_id)

    def _published_dir(self, owner: str, job_id: uuid.UUID) -> Path:
        return self._published / _owner_dir_name(owner) / str(job_id)

    def write_staged(self, job_id: uuid.UUID, name: str, data: bytes) -> StoredFile:
        """Write one private output atomically (temp file + rename; a crash leaves
        either the old file or the new one, never a torn one)."""
        directory = self._staging_dir(job_id)
        _private_dir(directory, top=self.root)
        target = directory / safe_name(name)
        temporary = directory / f".{name}.{uuid.uuid4().hex}.tmp"
        descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        with os.fdopen(descriptor, "wb") as handle:
            os.fchmod(handle.fileno(), FILE_MODE)  # the umask may have narrowed it further
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.replace(target)
        return StoredFile(name, len(data), hashlib.sha256(data).hexdigest())

    def has_staged(self, job_id: uuid.UUID, name: str) -> bool:
        return (self._staging_dir(job_id) / safe_name(name)).is_file()

    def read_staged(self, job_id: uuid.UUID, name: str) -> bytes:
        return (self._staging_dir(job_id) / safe_name(name)).read_bytes()

    def staged_files(self, job_id: uuid.UUID) -> list[StoredFile]:
        directory = self._staging_dir(job_id)
        if not directory.is_dir():
            return []
        return [_describe(path) for path in sorted(_visible_files(directory))]

    def publish(self, owner: str, job_id: uuid.UUID) -> list[StoredFile]:
        source = self._staging_dir(job_id)
        target = self._published_dir(owner, job_id)
        if not source.is_dir():
            if target.is_dir():  # an earlier publication moved it; its commit failed
                return [_describe(p) for p in sorted(_visible_files(target))]
            raise StorageError(f"nothing staged for job {job_id}")
        _private_dir(target.parent, top=self.root)
        if target.exists():
            shutil.rmtree(target)
        source.rename(target)
        return [_describe(path) for path in sorted(_visible_files(target))]

    def published_path(self, owner: str, job_id: uuid.UUID, name: str) -> Path | None:
        try:
            path = self._published_dir(owner, job_id) / safe_name(name)
        except StorageError:
            return None
        return path if path.is_file() else None

    def published_file(self, owner: str, job_id: uuid.UUID, name: str) -> PublishedFile | None:
        path = self.published_path(owner, job_id, name)
        return None if path is None else PublishedFile(path.stat().st_size, path=path)

    def remove_published(self, owner: str, job_id: uuid.UUID) -> None:
        shutil.rmtree(self._published_dir(owner, job_id), ignore_errors=True)

    def remove_staging(self, job_id: uuid.UUID) -> None:
        shutil.rmtree(self._staging_dir(job_id), ignore_errors=True)

    def staged_job_ids(self) -> list[uuid.UUID]:
        """Jobs with a private staging area on disk (the sweeper removes those whose
        job is finished: blocked outputs, leftovers of a stale attempt)."""
        if not self._staging.is_dir():
            return []
        found = []
        for entry in self._staging.iterdir():
            try:
                found.append(uuid.UUID(entry.name))
            except ValueError:
                continue
        return found

    def published_entries(self) -> list[PublishedEntry]:
        """Every job directory in the published area (names only, no file is read):
        the sweeper compares them with the database to find files nothing references."""
        found: list[PublishedEntry] = []
        if not self._published.is_dir():
            return found
        for owner in self._published.iterdir():
            if not owner.is_dir():
                continue
            for entry in owner.iterdir():
                try:
                    found.append(PublishedEntry(owner.name, uuid.UUID(entry.name)))
                except ValueError:
                    continue
        return found

    def remove_published_entry(self, entry: PublishedEntry) -> None:
        shutil.rmtree(self._published / entry.owner_dir / str(entry.job_id), ignore_errors=True)


def make_store(settings: Settings) -> ResultStore:
    """The configured result store: ``filesystem`` under ``ATLAS_DATA_DIR/results``, or
    ``s3`` (``ATLAS_S3_*``; needs the ``s3`` extra)."""
    if settings.result_store == "s3":
        from atlas_jobs._app.objectstore import S3Store

        return S3Store.from_settings(settings)
    return FilesystemStore(settings.results_dir)


def owner_dir_name(owner: str) -> str:
    """The owner's part of a published location (hashed when not a safe name)."""
    return _owner_dir_name(owner)


def _visible_files(directory: Path) -> Iterator[Path]:
    return (p for p in directory.iterdir() if p.is_file() and not p.name.startswith("."))


def _describe(path: Path) -> StoredFile:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for chunk in iter(lambda: handle.read(1 << 16), b""):
            digest.update(chunk)
    return StoredFile(path.name, path.stat().st_size, digest.hexdigest())
