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


# --- the imports of routers and pages, read with ``ast`` ------------------------------

PACKAGE = "atlas_jobs._app"
ROUTER_PACKAGE = f"{PACKAGE}.api.routers"
PAGE_PACKAGE = f"{PACKAGE}.ui"
DATABASE_PACKAGE = f"{PACKAGE}.db"

STILL_REACHING_THE_DATABASE: dict[str, frozenset[str]] = {}
"""Route modules (by file name under ``app/``) that still import the database layer, each
with the modules it may still import, until they move behind a service. Empty: every
router and page goes through the services. A module listed here is still checked for
everything else (other routers, the pages)."""


def _module_of(path: Path, root: Path) -> str:
    """``app/api/routers/jobs.py`` -> ``atlas_jobs._app.api.routers.jobs``."""
    parts = path.relative_to(root / "app").with_suffix("").parts
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join((PACKAGE, *parts))


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module ``path`` imports, absolute, as Python resolves it (``from x import
    y`` counts ``x`` and ``x.y``, which may be a module; relative imports resolved)."""
    found: set[str] = set()
    here = _module_of(path, root)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, *([node.module] if node.module else [])])
            else:
                module = node.module or ""
            found.add(module)
            found.update(f"{module}.{alias.name}" for alias in node.names)
    return found


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _router_files() -> list[Path]:
    return sorted(path for path in ROUTERS.glob("*.py") if path.name != "__init__.py")


def _page_files() -> list[Path]:
    return sorted(PAGES.glob("*.py"))


def _database_imports(path: Path) -> set[str]:
    allowed = STILL_REACHING_THE_DATABASE.get(str(path.relative_to(ROOT / "app")), frozenset())
    return {
        module
        for module in imported_modules(path)
        if (_within(module, DATABASE_PACKAGE) or _within(module, "sqlalchemy"))
        and module not in allowed
    }


def test_routers_and_pages_never_import_the_database_layer() -> None:
    """Routers and the status page translate HTTP to service calls: nothing of
    ``atlas_jobs._app.db`` and nothing of SQLAlchemy (a connection, a statement, a row
    type) -- the services own every read and write."""
    offenders = {
        str(path.relative_to(ROOT)): sorted(found)
        for path in [*_router_files(), *_page_files()]
        if (found := _database_imports(path))
    }
    assert offenders == {}


def test_routers_import_neither_each_other_nor_the_pages() -> None:
    """A router that needs another's helper is a helper in the wrong place (it belongs in
    a service, or in the API layer's shared modules); a router never renders a page."""
    offenders = {}
    for path in _router_files():
        mine = _module_of(path, ROOT)
        found = sorted(
            module
            for module in imported_modules(path)
            if (_within(module, ROUTER_PACKAGE) and not _within(module, mine))
            or _within(module, PAGE_PACKAGE)
        )
        if found:
            offenders[path.name] = found
    assert offenders == {}


def test_pages_never_import_a_router() -> None:
    """The status page calls the services, as the routers do, never a router."""
    offenders = {
        path.name: sorted(m for m in imported_modules(path) if _within(m, ROUTER_PACKAGE))
        for path in _page_files()
        if any(_within(m, ROUTER_PACKAGE) for m in imported_modules(path))
    }
    assert offenders == {}


def test_the_allow_list_names_only_real_leftovers() -> None:
    """An entry of the allow-list is a module that still imports what it allows: a
    cleaned module leaves the list, so the list never hides a new import."""
    stale = {}
    for name, allowed in STILL_REACHING_THE_DATABASE.items():
        path = ROOT / "app" / name
        unused = allowed - imported_modules(path) if path.exists() else allowed
        if unused:
            stale[name] = sorted(unused)
    assert stale == {}


def test_the_import_checks_can_fail(tmp_path: Path) -> None:
    """The import reader sees each way a router could reach the database or another
    router: plain and from-imports, aliases, relative imports, and imports inside
    functions."""
    folder = tmp_path / "app" / "api" / "routers"
    folder.mkdir(parents=True)
    probe = folder / "probe.py"
    probe.write_text(
        "import sqlalchemy as sa\n"
        "from atlas_jobs._app.db import reads\n"
        "from . import jobs\n"
        "def f():\n"
        "    from atlas_jobs._app.ui.routes import page\n"
    )
    found = imported_modules(probe, tmp_path)
    assert "sqlalchemy" in found
    assert "atlas_jobs._app.db.reads" in found
    assert "atlas_jobs._app.api.routers.jobs" in found
    assert "atlas_jobs._app.ui.routes" in found
