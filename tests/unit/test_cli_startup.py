"""The console command starts at once: its help and the client verbs import nothing of
the server (no SQLAlchemy, pydantic, FastAPI or the server's own modules), and
``import atlas_jobs`` loads no pydantic until a kind is declared."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.support import REPO, free_port

SERVER_PACKAGES = ("sqlalchemy", "pydantic", "pydantic_settings", "fastapi", "asyncpg", "alembic")
SERVER_MODULES = (
    "atlas_jobs._app.api",
    "atlas_jobs._app.services",
    "atlas_jobs._app.db",
    "atlas_jobs._app.settings",
    "atlas_jobs._app.apikeys",
    "atlas_jobs._app.kinds",
    "atlas_jobs._app.cli.preflight",
    "atlas_jobs._workers",
    "atlas_jobs.declaration",
)

PROBE = """
import json, sys
sys.argv = ["atlas-jobs", *json.loads(sys.argv[1])]
from atlas_jobs._app.cli import main
try:
    main()
except SystemExit as exit:
    code = exit.code
else:
    code = 0
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def loaded_by(*argv: str, env: dict[str, str] | None = None) -> tuple[object, list[str]]:
    done = subprocess.run(
        [sys.executable, "-c", PROBE, json.dumps(list(argv))],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
        env=env,
        check=False,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"]


def server_modules(modules: list[str]) -> list[str]:
    return [
        m for m in modules if m.split(".")[0] in SERVER_PACKAGES or m.startswith(SERVER_MODULES)
    ]


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["status", "--help"],
        ["serve", "--help"],
        ["keys", "create", "--help"],
        ["schedules", "list", "--help"],
    ],
)
def test_help_imports_nothing_of_the_server(argv: list[str]) -> None:
    code, modules = loaded_by(*argv)
    assert code == 0
    assert server_modules(modules) == []
    assert "httpx" not in modules  # help needs no HTTP either


def test_a_client_verb_imports_nothing_of_the_server() -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "ATLAS_URL": f"http://127.0.0.1:{free_port()}",
        "ATLAS_API_KEY": "atlas_not_a_key",
    }
    code, modules = loaded_by("status", "0190a5c4-6f0e-7a3b-9c1d-2e3f4a5b6c7d", env=env)
    assert code == 3  # the API is unreachable: everything needed to read a job was loaded
    assert "httpx" in modules
    assert server_modules(modules) == []


def test_import_atlas_jobs_is_light_and_its_names_still_resolve() -> None:
    code = (
        "import sys, atlas_jobs\n"
        "light = 'pydantic' not in sys.modules\n"
        "from atlas_jobs import Context, Result, RetryPolicy, Stage, kind\n"
        "listed = sorted(atlas_jobs.__all__) == dir(atlas_jobs)\n"
        "print(light, kind.__module__, Context.__module__, listed)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True
    )
    assert done.stdout.split() == ["True", "atlas_jobs.declaration", "atlas_jobs.context", "True"]
