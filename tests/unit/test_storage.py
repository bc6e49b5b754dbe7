"""Result files are private to the account running Atlas (a reliability finding): every
directory of the result store is 0700 and every file 0600, whatever the umask."""

from __future__ import annotations

import os
import stat
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from atlas_jobs._app.storage import FilesystemStore


@pytest.fixture
def permissive_umask() -> Iterator[None]:
    """The loosest umask: any mode the store gets right is its own doing."""
    previous = os.umask(0)
    try:
        yield
    finally:
        os.umask(previous)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def _modes_below(root: Path) -> dict[Path, int]:
    found = {root: _mode(root)}
    for directory, subdirs, files in os.walk(root):
        for name in [*subdirs, *files]:
            path = Path(directory) / name
            found[path] = _mode(path)
    return found


@pytest.mark.usefixtures("permissive_umask")
def test_staged_and_published_results_are_0700_directories_and_0600_files(
    tmp_path: Path,
) -> None:
    root = tmp_path / "results"
    store = FilesystemStore(root)
    job_id = uuid.uuid4()
    store.write_staged(job_id, "bundle.zip", b"zip")
    store.write_staged(job_id, "manifest.json", b"{}")
    staged = _modes_below(root)
    assert len(staged) == 5  # results, staging, <job>, two files
    store.publish("alice", job_id)
    published = _modes_below(root)
    assert len(published) == 7  # results, staging, published, alice, <job>, two files
    for path, mode in {**staged, **published}.items():
        if not path.exists():
            continue
        expected = 0o700 if path.is_dir() else 0o600
        assert mode == expected, f"{path.relative_to(tmp_path)} is {oct(mode)}"


@pytest.mark.usefixtures("permissive_umask")
def test_existing_loose_directories_are_tightened(tmp_path: Path) -> None:
    root = tmp_path / "results"
    (root / "published" / "alice").mkdir(parents=True, mode=0o755)
    for path in (root, root / "published", root / "published" / "alice"):
        path.chmod(0o755)
    store = FilesystemStore(root)
    job_id = uuid.uuid4()
    store.write_staged(job_id, "tile.txt", b"t")
    store.publish("alice", job_id)
    for path in (root, root / "published", root / "published" / "alice"):
        assert _mode(path) == 0o700, path
