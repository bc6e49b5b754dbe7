"""Where rules and SQL may live, checked on the source (the import-linter contracts in
pyproject.toml check the imports)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ROUTERS = ROOT / "app" / "api" / "routers"
PAGES = ROOT / "app" / "ui"
"""The status page's routes are routers too: the same rules hold for them."""


def route_modules() -> list[Path]:
    return sorted([*ROUTERS.glob("*.py"), *PAGES.glob("*.py")])


WRITES_TO_JOBS = re.compile(
    r"(update|insert)\s*\(\s*jobs\b|\b(UPDATE|INSERT\s+INTO)\s+jobs\b", re.IGNORECASE
)

SQL_IMPORT = re.compile(r"\bfrom sqlalchemy import\b.*\b(select|text|update|insert)\b")


def test_routers_never_write_jobs_nor_lock_rows() -> None:
    """Every state change goes through the transition service: a router neither
    updates nor inserts ``jobs`` nor locks a row to check a rule itself."""
    offenders = []
    for path in route_modules():
        source = path.read_text()
        if WRITES_TO_JOBS.search(source) or "with_for_update" in source or "FOR UPDATE" in source:
            offenders.append(path.name)
    assert offenders == []


def test_routers_hold_no_sql() -> None:
    """Reads live in atlas_jobs._app.db.reads, writes in atlas_jobs._app.transitions: no SQL
    in a router."""
    offenders = [
        path.name
        for path in route_modules()
        if re.search(
            r"\bfrom sqlalchemy import\b.*\b(select|text|update|insert)\b", path.read_text()
        )
    ]
    assert offenders == []


def test_the_checks_above_can_fail(tmp_path: Path) -> None:
    """The patterns match the ways a router could write to jobs."""
    for line in (
        "await conn.execute(update(jobs).values(state='failed'))",
        "await conn.execute(insert(jobs).values(owner='x'))",
        'await conn.execute(text("UPDATE jobs SET state = 1"))',
    ):
        assert WRITES_TO_JOBS.search(line), line


def test_only_the_executor_and_its_named_sql_write_job_rows() -> None:
    """``UPDATE jobs`` / ``INSERT INTO jobs`` appear only in atlas_jobs._app.db.moves (every
    transition) and atlas_jobs._app.db.queries (creation and claiming)."""
    homes = {ROOT / "app" / "db" / "moves.py", ROOT / "app" / "db" / "queries.py"}
    offenders = [
        str(path.relative_to(ROOT))
        for folder in ("app", "workers")
        for path in sorted((ROOT / folder).rglob("*.py"))
        if path not in homes and WRITES_TO_JOBS.search(path.read_text())
    ]
    assert offenders == []


def _imports_a_folder_by_its_name(source: str) -> bool:
    for node in ast.walk(ast.parse(source)):
        names = (
            [alias.name for alias in node.names]
            if isinstance(node, ast.Import)
            else [node.module or ""]
            if isinstance(node, ast.ImportFrom) and node.level == 0
            else []
        )
        if any(name.split(".")[0] in {"app", "workers"} for name in names):
            return True
    return False


def test_nothing_imports_the_folders_as_top_level_packages() -> None:
    """The distribution installs one top-level package, ``atlas_jobs``: the folders
    ``app/`` and ``workers/`` are its internal ``atlas_jobs._app`` and
    ``atlas_jobs._workers``, so a user's own ``app`` and ``workers`` packages can sit
    beside it. Importing a folder by its own name would load every module twice."""
    sources = [
        path
        for folder in (
            "app",
            "workers",
            "atlas_jobs",
            "tests",
            "benchmarks",
            "chaos",
            "harness",
            "scripts",
        )
        if (ROOT / folder).is_dir() and not (ROOT / folder).is_symlink()
        for path in (ROOT / folder).rglob("*.py")
    ]
    offenders = [
        str(path.relative_to(ROOT))
        for path in sources
        if _imports_a_folder_by_its_name(path.read_text())
    ]
    assert sources
    assert offenders == []
