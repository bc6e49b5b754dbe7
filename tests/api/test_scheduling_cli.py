"""``atlas-jobs scheduling ...`` against a live API: an operator sets a share and a key's
limit and rate, sees them, and finds each change under its name; a client is refused."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from tests.api.conftest import LiveApi
from tests.api.test_cli import cli


async def test_scheduling_verbs_over_http(live_api: LiveApi, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        operator = await create_key(conn, owner="ops", roles=[Role.OPERATOR])
        client = await create_key(conn, owner="carol", roles=[Role.CLIENT])
    env = {"ATLAS_URL": live_api.url, "ATLAS_API_KEY": operator}

    share = cli("scheduling", "set-share", "carol", "3", "--note", "big tenant", env=env)
    assert share.returncode == 0, share.stderr
    assert share.stdout.strip() == "owner carol  share=3"
    key = cli(
        "scheduling", "set-key", "press", "--limit", "2", "--rate", "5", "--per", "60", env=env
    )
    assert key.returncode == 0, key.stderr
    assert key.stdout.strip() == "key press  running=0  limit=2  rate=5/60s"

    shown = cli("scheduling", "show", env=env).stdout.splitlines()
    assert shown == [
        "owner carol  share=3  by operator:ops",
        "key press  running=0  limit=2  rate=5/60s",
    ]
    changes = cli("scheduling", "changes", env=env).stdout.splitlines()
    assert [line.split("  ")[1:3] for line in changes] == [
        ["operator:ops", "concurrency_key press"],
        ["operator:ops", "owner_share carol"],
    ]

    bad = cli("scheduling", "set-share", "carol", "0", env=env)
    assert bad.returncode == 1
    assert "422" in bad.stderr
    refused = cli("scheduling", "set-share", "carol", "2", env={**env, "ATLAS_API_KEY": client})
    assert refused.returncode == 4  # the client verbs' code for a key that may not
    assert "403" in refused.stderr
    assert "Traceback" not in bad.stderr + refused.stderr
