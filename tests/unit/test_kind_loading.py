"""Loading declared kinds: modules, versions, compatibility, and the refusals that stop a
process before it serves anything (one line naming the cause)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from atlas_jobs import Concurrency, Rate, RetryPolicy, Stage, kind
from atlas_jobs._app.kinds.registry import KindLoadError, KindSpec, load
from atlas_jobs._app.services.kinds import concurrency_public
from atlas_jobs._app.services.schemas import ConcurrencyPublic
from tests.support import REPO

DEMO_V1 = """
    from pydantic import BaseModel
    from atlas_jobs import Context, kind

    class Photo(BaseModel):
        url: str

    @kind("demo.photo", version=1, input=Photo, description="Renders a photo.")
    async def photo(ctx: Context[Photo]) -> None:
        return None
"""

DEMO_V2 = """
    from pydantic import BaseModel
    from atlas_jobs import Context, kind

    class Photo(BaseModel):
        url: str
        sizes: list[int] = [64]

    @kind("demo.photo", version=2, input=Photo, compatible_versions={1})
    async def photo_v2(ctx: Context[Photo]) -> None:
        return None

    @kind("demo.other", input=Photo)
    def other(ctx) -> None:
        return None
"""


@pytest.fixture
def modules(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for name, source in {
        "demo_v1": DEMO_V1,
        "demo_v2": DEMO_V2,
        "demo_again": DEMO_V1,
        "demo_broken": "import no_such_dependency_here\n",
        "demo_empty": "VALUE = 1\n",
    }.items():
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_the_api_accepts_each_name_at_its_newest_version_and_workers_serve_compatible_ones(
    modules: Path,
) -> None:
    registry = load(["demo_v1", "demo_v2"], builtin=False, use_entry_points=False)
    assert sorted(registry.declared) == ["demo.other@1", "demo.photo@1", "demo.photo@2"]
    newest = registry.newest
    assert (newest["demo.photo"].version, newest["demo.other"].version) == (2, 1)
    assert newest["demo.photo"].summary == ""
    assert registry.declared["demo.photo@1"].summary == "Renders a photo."
    served = registry.served()
    # A declared version's own handler wins over a newer one's compatibility.
    assert served["demo.photo@1"].version == 1
    only_v2 = load(["demo_v2"], builtin=False, use_entry_points=False).served()
    assert only_v2["demo.photo@1"].version == 2
    assert only_v2["demo.photo@1"].source == "demo_v2"


def test_the_built_in_kinds_load_unless_turned_off(modules: Path) -> None:
    assert sorted(load([], builtin=True, use_entry_points=False).newest) == [
        "atlas.bundle",
        "atlas.noop",
        "document.publish",
    ]
    assert load(["demo_v1"], builtin=False, use_entry_points=False).newest.keys() == {"demo.photo"}


@pytest.mark.parametrize(
    ("named", "says"),
    [
        (["demo_broken"], "cannot import the kinds module 'demo_broken': ModuleNotFoundError"),
        (["demo_missing"], "cannot import the kinds module 'demo_missing': ModuleNotFoundError"),
        (["demo_v1", "demo_again"], "demo.photo@1 is declared twice: in demo_v1 and in demo_again"),
        (["demo_empty"], "holds no atlas_jobs.Kind"),
    ],
)
def test_a_module_that_cannot_be_loaded_is_refused_in_one_line(
    modules: Path, named: list[str], says: str
) -> None:
    with pytest.raises(KindLoadError) as refused:
        load(named, builtin=False, use_entry_points=False)
    assert says in str(refused.value)
    assert "\n" not in str(refused.value)


def test_a_declaration_is_checked_when_it_is_made() -> None:
    async def handler(ctx: object) -> None:
        return None

    with pytest.raises(ValueError, match="must match"):
        kind("Not A Name")(handler)
    with pytest.raises(ValueError, match="compatible versions are older"):
        kind("demo.x", version=2, compatible_versions={3})(handler)
    with pytest.raises(ValueError, match="stage names must be unique"):
        kind("demo.x", stages=[Stage("a", "u"), Stage("a", "v")])(handler)
    with pytest.raises(ValueError, match="lower_snake_case"):
        RetryPolicy(transient={OSError: "Not A Code"})
    with pytest.raises(TypeError, match="not an exception class"):
        RetryPolicy(permanent={int: "number"})  # type: ignore[dict-item]
    with pytest.raises(ValueError, match="needs a limit, a rate or both"):
        Concurrency(key="press")
    with pytest.raises(ValueError, match="starts must be between 1"):
        Rate(0, per_seconds=1)
    with pytest.raises(ValueError, match="per_seconds must be above 0"):
        Rate(5, per_seconds=0)
    assert Concurrency(rate=Rate(10, per_seconds=60)).limit is None
    declared = kind("demo.x", timeout=None)(handler)
    assert (declared.key, declared.timeout, declared.input.model_validate({}).model_dump()) == (
        "demo.x@1",
        None,
        {},
    )


def cli(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("ATLAS_KINDS", None)
    return subprocess.run(
        [sys.executable, "-m", "atlas_jobs._app.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_openapi_with_kinds_gives_each_kind_its_own_input_schema(modules: Path) -> None:
    done = cli(["openapi", "--kinds", "demo_v1"], cwd=modules)
    assert done.returncode == 0, done.stderr
    schemas = json.loads(done.stdout)["components"]["schemas"]
    create = schemas["DemoPhotoJobCreate"]
    assert create["properties"]["kind"]["const"] == "demo.photo"
    assert create["properties"]["input"]["$ref"].endswith("/Photo")
    assert "AtlasBundleJobCreate" in schemas  # the built-in kinds stay beside it


def test_a_kinds_module_that_fails_to_import_stops_the_command_in_one_line(
    modules: Path,
) -> None:
    done = cli(["openapi", "--kinds", "demo_broken"], cwd=modules)
    assert done.returncode == 1
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert "demo_broken" in line
    assert "No module named 'no_such_dependency_here'" in line


def test_a_kinds_concurrency_declaration_is_listed_as_declared() -> None:
    async def handler(ctx: object) -> None:
        return None

    paced = Concurrency(rate=Rate(10, per_seconds=60), per_job=True)
    spec = KindSpec.of(kind("crm.sync", concurrency=paced)(handler), source="test")
    shown = concurrency_public(spec)
    assert shown is not None
    assert shown.model_dump() == {
        "key": "crm.sync",
        "limit": None,
        "rate": {"starts": 10, "per_seconds": 60.0},
        "per_job": True,
    }
    press = KindSpec.of(
        kind("press.print", concurrency=Concurrency(3, key="press"))(handler), source="t"
    )
    assert concurrency_public(press) == ConcurrencyPublic(
        key="press", limit=3, rate=None, per_job=False
    )
    assert concurrency_public(KindSpec.of(kind("demo.free")(handler), source="t")) is None
