"""Status page fixtures: the API fixtures (the app in-process, keys, the driver) and a
logged-in browser-like client."""

from __future__ import annotations

import re

import httpx

from tests.api.conftest import api_settings, app, client, driver, keys  # noqa: F401

BASE = "http://atlas.test"
SAME_ORIGIN = {"Origin": BASE, "Sec-Fetch-Site": "same-origin"}
_CSRF = re.compile(r'<meta name="csrf-token" content="([^"]+)">')


async def log_in(http: httpx.AsyncClient, key: str) -> str:
    """Log in through the form; the CSRF token of the session (from a page)."""
    answer = await http.post(
        "/ui/login", data={"api_key": key, "next": "/ui/jobs"}, headers=SAME_ORIGIN
    )
    assert answer.status_code == 303, answer.text
    page = await http.get("/ui/jobs")
    assert page.status_code == 200, page.text
    found = _CSRF.search(page.text)
    assert found is not None
    return found.group(1)
