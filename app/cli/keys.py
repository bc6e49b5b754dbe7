"""``atlas-jobs keys``: API key management. (Filled in by the HTTP API work.)"""

from __future__ import annotations

import typer

keys_app = typer.Typer(help="Create and list API keys (stored hashed; shown once).")
