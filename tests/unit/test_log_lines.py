"""Every log line is written in ONE call, message and newline together: processes that
share a stderr (``serve``: the API and its worker processes) cannot interleave within a
line, also when stderr is unbuffered (``PYTHONUNBUFFERED``), where ``print`` writes the
message and its newline in two calls -- which once glued two worker processes'
``worker.started`` lines into one."""

from __future__ import annotations

import io
import json
import logging
import sys
from collections.abc import Iterator

import pytest
import structlog

from atlas_jobs._app.logs import configure_logging, get_logger
from atlas_jobs._app.settings import Settings


class Calls(io.StringIO):
    """A stream that remembers each ``write`` call."""

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def write(self, text: str) -> int:
        self.calls.append(text)
        return super().write(text)


@pytest.fixture
def restore_logging() -> Iterator[None]:
    """The logging configuration exactly as it was (level, renderer, stream, handlers):
    tests after this one in the same process read the logs as configured for them."""
    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    yield
    structlog.configure(**saved)
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_each_line_is_one_write(monkeypatch: pytest.MonkeyPatch) -> None:
    stderr = Calls()
    monkeypatch.setattr(sys, "stderr", stderr)  # in the test: pytest's capture resumes before it
    configure_logging(Settings(log_format="json", log_level="INFO"))
    log = get_logger("atlas.test")
    log.info("worker.started", worker_id="serve-0", concurrency=4)
    log.info("worker.started", worker_id="serve-1", concurrency=4)
    monkeypatch.undo()

    lines = [call for call in stderr.calls if call]
    assert len(lines) == 2
    for line in lines:
        assert line.endswith("\n")
        assert line.count("\n") == 1
        assert json.loads(line)["event"] == "worker.started"
