"""``atlas-jobs schedules ...`` against a live API."""

from __future__ import annotations

import json

from sqlalchemy.ext.asyncio import AsyncEngine

from atlas_jobs._app.apikeys import Role, create_key
from tests.api.conftest import LiveApi
from tests.api.test_cli import cli
from tests.support import free_port


async def test_schedule_verbs_over_http(live_api: LiveApi, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="carol", roles=[Role.CLIENT])
    env = {"ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}

    made = cli(
        "schedules", "create", "--cron", "0 2 * * *", "--tz", "Europe/Berlin",
        "--kind", "atlas.noop", "--name", "nightly", "--catch-up", "3", "--json",
        "--delay", "30", "--start-within", "600", "--priority", "7",
        "--tag", "team=press", "--tag", "env=prod",
        env=env,
    )  # fmt: skip
    assert made.returncode == 0, made.stderr
    schedule = json.loads(made.stdout)
    job = schedule["job"]
    assert (job["delay_seconds"], job["start_within_seconds"], job["priority"]) == (30, 600, 7)
    assert job["tags"] == ["env=prod", "team=press"]
    assert schedule["misfire_policy"] == "catch_up"
    assert schedule["catch_up_limit"] == 3
    assert schedule["owner"] == "carol"

    listed = cli("schedules", "list", env=env)
    row = listed.stdout.rstrip("\n").split("\t")
    assert row[:5] == [schedule["id"], "nightly", "on", "0 2 * * *", "Europe/Berlin"]
    assert row[-1] == "atlas.noop"

    paused = cli("schedules", "pause", schedule["id"], env=env)
    assert paused.stdout.split("\t")[2:6] == ["off", "0 2 * * *", "Europe/Berlin", "-"]
    resumed = cli("schedules", "resume", schedule["id"], env=env)
    assert resumed.stdout.split("\t")[2] == "on"

    bad = cli("schedules", "create", "--cron", "nope", "--kind", "atlas.noop", env=env)
    assert bad.returncode == 1
    assert "422" in bad.stderr
    assert "Traceback" not in bad.stderr

    gone = cli("schedules", "delete", schedule["id"], env=env)
    assert gone.returncode == 0
    missing = cli("schedules", "show", schedule["id"], env=env)
    assert missing.returncode == 1
    assert "404" in missing.stderr

    down = cli("schedules", "list", env={**env, "ATLAS_URL": f"http://127.0.0.1:{free_port()}"})
    assert down.returncode == 3  # the client verbs' code for an unreachable API
    assert down.stderr.count("\n") == 1
    assert "Traceback" not in down.stderr


async def test_webhook_verbs_over_http(live_api: LiveApi, engine: AsyncEngine) -> None:
    async with engine.begin() as conn:
        key = await create_key(conn, owner="dora", roles=[Role.CLIENT])
    env = {"ATLAS_URL": live_api.url, "ATLAS_API_KEY": key}
    made = cli("webhooks", "create", "https://93.184.216.34/hooks", "--json", env=env)
    assert made.returncode == 0, made.stderr
    hook = json.loads(made.stdout)
    assert hook["secret"].startswith("whsec_")
    listed = cli("webhooks", "list", env=env)
    assert listed.stdout == f"{hook['id']}\thttps://93.184.216.34/hooks\t\n"
    refused = cli("webhooks", "create", "http://169.254.169.254/", env=env)
    assert refused.returncode == 1
    assert "422" in refused.stderr
    assert cli("webhooks", "delete", hook["id"], env=env).returncode == 0
    empty = cli("webhooks", "list", env=env)
    assert (empty.returncode, empty.stdout, empty.stderr) == (0, "", "no webhook endpoints\n")
