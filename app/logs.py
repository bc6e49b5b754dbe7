"""Structured logging (structlog): JSON in production, readable in a terminal.

Log identifiers (request id, job id, owner, attempt id, worker id), never payloads:
no job input, no result contents, no API keys, no signed URLs.
"""

from __future__ import annotations

import logging
import sys

import structlog

from atlas_jobs._app.settings import Settings


def configure_logging(settings: Settings) -> None:
    level = logging.getLevelNamesMapping().get(settings.log_level.upper(), logging.INFO)
    shared: list[structlog.types.Processor] = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer()
        if settings.log_format == "json"
        else structlog.dev.ConsoleRenderer(colors=False)
    )
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(level),
        # ONE write per line (message and newline together): processes sharing a stderr
        # (serve: the API and its workers) cannot interleave within a line, also when it
        # is unbuffered (PYTHONUNBUFFERED, usual in containers), where print() would
        # write the message and its newline in two calls.
        logger_factory=structlog.WriteLoggerFactory(file=sys.stderr),
        cache_logger_on_first_use=True,
    )
    # Libraries log through the standard library (uvicorn, asyncio, SQLAlchemy): their
    # records go through the same renderer, so in production every line is one JSON
    # object. Their exception text is dropped: it can quote data (format_exc_info would
    # render a traceback whose message quotes SQL parameters or a key's value).
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[
                *shared,
                structlog.stdlib.add_logger_name,
                structlog.stdlib.ExtraAdder(),
                _drop_exception_text,
            ],
            processors=[structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer],
        )
    )
    logging.basicConfig(level=max(level, logging.WARNING), handlers=[handler], force=True)


def _drop_exception_text(
    _logger: object, _name: str, event: structlog.types.EventDict
) -> structlog.types.EventDict:
    record = event.get("_record")
    if record is not None and record.exc_info:
        event["error_class"] = type(record.exc_info[1]).__name__
        record.exc_info = None
        record.exc_text = None
    event.pop("exc_info", None)
    return event


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.get_logger(name)
    return logger
