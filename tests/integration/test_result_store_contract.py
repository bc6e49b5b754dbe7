"""One contract, two stores: the filesystem store and the S3-compatible store (against
a real moto server) pass the same tests -- staging, atomic publication and what a
failed commit leaves, downloads, retention's removal, the sweeper's listings."""

from __future__ import annotations

import hashlib
import uuid
from pathlib import Path

import pytest

from atlas_jobs._app.objectstore import S3Store
from atlas_jobs._app.storage import FilesystemStore, PublishedEntry, ResultStore, StorageError
from tests.objectstore import ObjectServer


@pytest.fixture(params=["filesystem", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ResultStore:
    if request.param == "filesystem":
        return FilesystemStore(tmp_path / "results")
    server: ObjectServer = request.getfixturevalue("object_server")
    return S3Store(server.client(), server.new_bucket(), prefix="atlas")


def read(store: ResultStore, owner: str, job_id: uuid.UUID, name: str) -> bytes | None:
    found = store.published_file(owner, job_id, name)
    if found is None:
        return None
    if found.path is not None:
        return found.path.read_bytes()
    assert found.chunks is not None
    data = b"".join(found.chunks())
    assert len(data) == found.size
    return data


def test_staged_files_are_private_until_published(store: ResultStore) -> None:
    job_id = uuid.uuid4()
    written = store.write_staged(job_id, "tile.txt", b"tile")
    assert written.sha256 == hashlib.sha256(b"tile").hexdigest()
    assert written.size == 4
    assert store.has_staged(job_id, "tile.txt")
    assert not store.has_staged(job_id, "other.txt")
    assert store.read_staged(job_id, "tile.txt") == b"tile"
    store.write_staged(job_id, "tile.txt", b"tile v2")  # replaced whole
    assert store.read_staged(job_id, "tile.txt") == b"tile v2"
    assert [f.as_dict() for f in store.staged_files(job_id)] == [
        {"name": "tile.txt", "size": 7, "sha256": hashlib.sha256(b"tile v2").hexdigest()}
    ]
    assert read(store, "alice", job_id, "tile.txt") is None  # never downloadable
    assert job_id in store.staged_job_ids()


def test_publication_moves_everything_staged_and_only_that(store: ResultStore) -> None:
    job_id = uuid.uuid4()
    store.write_staged(job_id, "bundle.zip", b"zip")
    store.write_staged(job_id, "manifest.json", b"{}")
    files = store.publish("alice", job_id)
    assert [(f.name, f.size) for f in files] == [("bundle.zip", 3), ("manifest.json", 2)]
    assert files[0].sha256 == hashlib.sha256(b"zip").hexdigest()
    assert read(store, "alice", job_id, "bundle.zip") == b"zip"
    assert read(store, "bob", job_id, "bundle.zip") is None  # another owner's area
    assert read(store, "alice", job_id, "../bundle.zip") is None
    assert store.staged_files(job_id) == []
    assert job_id not in store.staged_job_ids()
    assert PublishedEntry("alice", job_id) in store.published_entries()


def test_a_publication_whose_commit_failed_is_repeated_and_replaced(
    store: ResultStore,
) -> None:
    job_id = uuid.uuid4()
    store.write_staged(job_id, "bundle.zip", b"first")
    first = store.publish("alice", job_id)
    # The commit failed: the next attempt of the same publication finds the copies...
    assert store.publish("alice", job_id) == first
    # ... and a later attempt that staged again replaces them whole.
    store.write_staged(job_id, "other.zip", b"second")
    assert [f.name for f in store.publish("alice", job_id)] == ["other.zip"]
    assert read(store, "alice", job_id, "bundle.zip") is None
    with pytest.raises(StorageError):
        store.publish("alice", uuid.uuid4())  # nothing staged, nothing published


def test_retention_and_cleanup_remove_the_objects(store: ResultStore) -> None:
    published, blocked = uuid.uuid4(), uuid.uuid4()
    store.write_staged(published, "bundle.zip", b"zip")
    store.publish("alice", published)
    store.write_staged(blocked, "tile.txt", b"t")
    store.remove_published("alice", published)
    assert read(store, "alice", published, "bundle.zip") is None
    assert PublishedEntry("alice", published) not in store.published_entries()
    store.remove_staging(blocked)
    assert not store.has_staged(blocked, "tile.txt")
    assert blocked not in store.staged_job_ids()


def test_the_sweeper_lists_and_removes_published_entries(store: ResultStore) -> None:
    jobs = {uuid.uuid4(): owner for owner in ("alice", "bob", "carol@example.org", "a/b")}
    for job_id, owner in jobs.items():
        store.write_staged(job_id, "bundle.zip", b"z")
        store.publish(owner, job_id)
    entries = store.published_entries()
    assert {e.job_id for e in entries} == set(jobs)
    unsafe = next(e for e in entries if jobs[e.job_id] == "a/b")
    assert "/" not in unsafe.owner_dir  # an owner is never a path
    store.remove_published_entry(unsafe)
    assert read(store, "a/b", unsafe.job_id, "bundle.zip") is None
    assert {e.job_id for e in store.published_entries()} == set(jobs) - {unsafe.job_id}


def test_unsafe_names_are_refused(store: ResultStore) -> None:
    for name in ("../x", "a/b", ".hidden", ""):
        with pytest.raises(StorageError):
            store.write_staged(uuid.uuid4(), name, b"x")
