"""``atlas-jobs list`` with the search filters, ``submit --tag``, ``keys create --kind``
and the ``bulk`` verbs (create with --dry-run, status, cancel, list) against a live API."""

from __future__ import annotations

import json
from pathlib import Path

from tests.api.conftest import LiveApi
from tests.api.test_cli import cli


def test_list_filters_tags_and_bulk_verbs_over_http(
    live_api: LiveApi, database_url: str, data_dir: Path
) -> None:
    base = {"DATABASE_URL": database_url, "ATLAS_DATA_DIR": str(data_dir)}
    alice = cli("keys", "create", "--owner", "alice", "--role", "client", env=base)
    ops = cli(
        "keys", "create", "--owner", "ops", "--role", "operator", "--kind", "atlas.noop", env=base
    )
    assert ops.returncode == 0, ops.stderr
    as_alice = {**base, "ATLAS_URL": live_api.url, "ATLAS_API_KEY": alice.stdout.strip()}
    as_ops = {**base, "ATLAS_URL": live_api.url, "ATLAS_API_KEY": ops.stdout.strip()}

    ids = []
    for tag in ("run=1", "run=1", "run=2"):
        made = cli("submit", "--kind", "atlas.noop", "--tag", tag, "--json", env=as_alice)
        assert made.returncode == 0, made.stderr
        assert json.loads(made.stdout)["tags"] == [tag]
        ids.append(json.loads(made.stdout)["id"])

    listed = cli("list", "--tag", "run=1", "--owner", "alice", "--json", env=as_ops)
    assert listed.returncode == 0, listed.stderr
    assert [j["id"] for j in json.loads(listed.stdout)["items"]] == [ids[1], ids[0]]
    lines = cli("list", "--tag", "run=2", env=as_alice).stdout.splitlines()
    assert len(lines) == 1
    assert ids[2] in lines[0]
    assert "[run=2]" in lines[0]
    foreign = cli("list", "--owner", "bob", env=as_alice)
    assert foreign.returncode == 4  # the key lacks the role
    bad = cli("list", "--created-after", "yesterday", env=as_ops)
    assert bad.returncode == 1
    assert "created_after" in bad.stderr

    dry = cli("bulk", "create", "--action", "cancel", "--tag", "run=1", "--dry-run", env=as_ops)
    assert dry.returncode == 0, dry.stderr
    assert "would cancel among 2 matching jobs" in dry.stdout
    refused = cli("bulk", "create", "--action", "cancel", "--tag", "run=1", env=as_alice)
    assert refused.returncode == 4

    started = cli(
        "bulk",
        "create",
        "--action",
        "cancel",
        "--tag",
        "run=1",
        "--note",
        "test",
        "--json",
        env=as_ops,
    )
    assert started.returncode == 0, started.stderr
    operation = json.loads(started.stdout)
    assert operation["state"] == "queued"
    assert operation["kinds"] == ["atlas.noop"]
    status = cli("bulk", "status", operation["id"], env=as_ops)
    assert status.stdout.startswith(f"{operation['id']}  cancel  queued")
    canceled = cli("bulk", "cancel", operation["id"], env=as_ops)
    assert canceled.returncode == 0, canceled.stderr
    assert "canceled" in canceled.stdout
    again = cli("bulk", "cancel", operation["id"], env=as_ops)
    assert again.returncode == 1
    listed_ops = cli("bulk", "list", env=as_ops)
    assert operation["id"] in listed_ops.stdout
