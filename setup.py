"""Build hook (everything else is in pyproject.toml): the wheel carries the migrations.

The alembic scripts stay in the top-level ``alembic/`` folder of the checkout (where
alembic and the developers expect them); building copies them into the package as
``app/migrations``, so an installed Atlas Jobs can ``atlas-jobs migrate`` and check its
schema without a checkout (``atlas_jobs._app.db.migrations.script_location``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildPyWithMigrations(build_py):
    def run(self) -> None:
        super().run()
        source = Path(__file__).resolve().parent / "alembic"
        target = Path(self.build_lib) / "app" / "migrations"
        shutil.copytree(
            source,
            target,
            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
            dirs_exist_ok=True,
        )


setup(cmdclass={"build_py": BuildPyWithMigrations})
