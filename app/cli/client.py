"""Client verbs (``submit``, ``status``, ``watch``, ``cancel``, ``result``) that talk to
a running service over HTTP (``ATLAS_URL``, ``ATLAS_API_KEY``). (Filled in by the HTTP
API work.)"""

from __future__ import annotations

import typer

client_app = typer.Typer(help="Client verbs.")


def register_client_verbs(app: typer.Typer) -> None:
    """Attach the client verbs to the top-level command."""
