"""``atlas-jobs dev-webhook``: a local receiver for completion callbacks, for trying
webhooks on one machine without a network.

It answers every ``POST`` with ``204`` and prints one line per delivery: its
``webhook-id`` (the same on every retry of one notification), the job, its state, and
whether the Standard Webhooks signature verified (with ``--secret``: the endpoint's
``whsec_...`` secret; without it the signature is not checked). ``--log FILE`` also
appends each delivery's headers and body as one JSON line.
"""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

MAX_BODY_BYTES = 1_000_000
_SIGNED_HEADERS = ("webhook-id", "webhook-timestamp", "webhook-signature")


def signature_note(secret: str | None, headers: dict[str, str], body: bytes) -> str:
    """``signature ok``, ``signature BAD`` or ``signature not checked`` (no secret)."""
    if not secret:
        return "signature not checked"
    from standardwebhooks import Webhook
    from standardwebhooks.webhooks import WebhookVerificationError

    try:
        Webhook(secret).verify(body, {k: headers.get(k, "") for k in _SIGNED_HEADERS})
    except WebhookVerificationError:
        return "signature BAD"
    return "signature ok"


def delivery_line(headers: dict[str, str], body: bytes, note: str) -> str:
    try:
        status: Any = json.loads(body)
    except ValueError:
        status = None
    if isinstance(status, dict):
        what = f"job {status.get('id')} {status.get('state')}"
        delivery = (status.get("delivery") or {}).get("state")
        if delivery:
            what += f" (delivery {delivery})"
    else:
        what = f"{len(body)} bytes (not JSON)"
    return f"{headers.get('webhook-id', '-')}  {what}  {note}"


def make_server(
    host: str, port: int, *, secret: str | None, log: Path | None
) -> ThreadingHTTPServer:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = min(int(self.headers.get("Content-Length") or 0), MAX_BODY_BYTES)
            body = self.rfile.read(length)
            headers = {name.lower(): value for name, value in self.headers.items()}
            note = signature_note(secret, headers, body)
            self.send_response(204 if note != "signature BAD" else 400)
            self.end_headers()
            with lock:
                print(delivery_line(headers, body, note), flush=True)
                if log is not None:
                    entry = {"path": self.path, "headers": headers, "body": body.decode()}
                    with log.open("a") as out:
                        out.write(json.dumps(entry) + "\n")

        def log_message(self, format: str, *args: Any) -> None:
            """Quiet: the delivery line says what arrived."""

    return ThreadingHTTPServer((host, port), Handler)


def serve(host: str, port: int, *, secret: str | None, log: Path | None) -> None:
    server = make_server(host, port, secret=secret, log=log)
    bound = server.server_address[1]
    print(f"webhook receiver on http://{host}:{bound}/ (Ctrl-C stops)", file=sys.stderr)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
