"""Configuration from the environment (12-factor), with documented defaults."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from atlas_jobs._app.addresses import DEFAULT_HOST, DEFAULT_PORT, bind_url
from atlas_jobs._app.destinations import DESTINATION_NAME, Destination


class Settings(BaseSettings):
    """Every knob the service reads. Each field is documented in docs/configuration.md."""

    model_config = SettingsConfigDict(env_prefix="ATLAS_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        validation_alias="DATABASE_URL",
        description="PostgreSQL 15+ URL; unset means the embedded server under data_dir.",
    )
    data_dir: Path = Field(default=Path(".atlas"), description="Embedded database and results.")
    result_ttl_seconds: float = Field(default=86400.0, gt=0, description="Result retention.")
    finished_job_retention_seconds: float = Field(
        default=7 * 86400.0,
        ge=0,
        description=(
            "How long a finished job (status, history, attempts) is kept beyond the result "
            "retention; then the sweeper prunes it. A downloadable result is never pruned."
        ),
    )
    prune_batch_size: int = Field(
        default=1000, gt=0, description="Most finished jobs one pruning statement deletes."
    )
    lease_seconds: float = Field(default=30.0, gt=0, description="Worker lease length.")
    bundle_time_scale: float = Field(default=1.0, ge=0, description="Scales simulated unit costs.")
    reaper_interval_seconds: float = Field(default=5.0, gt=0)
    activity_interval_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How often the workers update the per-minute rollup behind the status "
        "page's charts (one process at a time).",
    )
    sweeper_interval_seconds: float = Field(default=10.0, gt=0)
    webhook_interval_seconds: float = Field(
        default=1.0, gt=0, description="How often each worker process sends due webhooks."
    )
    webhook_max_attempts: int = Field(default=8, ge=1, le=100)
    webhook_timeout_seconds: float = Field(default=10.0, gt=0)
    webhook_backoff_base_seconds: float = Field(default=2.0, gt=0)
    webhook_backoff_cap_seconds: float = Field(default=600.0, gt=0)
    webhook_allowed_hosts: str = Field(
        default="",
        description="Comma-separated hosts (or *.domain) webhooks may call; empty: any "
        "public host.",
    )
    webhook_internal_hosts: str = Field(
        default="",
        description="Comma-separated hosts allowed although they are or resolve to loopback, "
        "private, link-local or other special-purpose addresses (e.g. a receiver on "
        "127.0.0.1 in development); still resolved once and connected to as checked.",
    )
    scheduler_interval_seconds: float = Field(
        default=1.0, gt=0, description="How often each worker process fires due schedule ticks."
    )
    poll_interval_seconds: float = Field(default=2.0, gt=0, description="Fallback claim poll.")
    bulk_interval_seconds: float = Field(
        default=1.0, gt=0, description="How often each worker process looks for bulk operations."
    )
    bulk_batch_size: int = Field(
        default=500,
        ge=1,
        le=10_000,
        description="Jobs a bulk operation acts on per transaction (one batch).",
    )
    bulk_lease_seconds: float = Field(
        default=30.0,
        gt=0,
        description=(
            "How long a worker holds a running bulk operation without finishing a batch; "
            "after that (its process died) another worker takes it over."
        ),
    )
    claim_cooldown_seconds: float = Field(
        default=0.1,
        ge=0,
        description=(
            "After a worker process's claims that new-work notifications triggered come "
            "back empty twice in a row (other processes won the jobs), the notifications "
            "it receives within this window are coalesced into one claim at its end: idle "
            "processes send about one claim per window instead of one per job. A process "
            "whose claims find jobs never waits; 0 turns it off."
        ),
    )
    worker_prefetch: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Most claimed jobs a worker process holds beyond its running slots, waiting "
            "for a slot (their leases are extended like running ones). Only taken while "
            "claims come back full; unset means the process's concurrency, 0 turns it off."
        ),
    )
    index_rebuild_min_mb: int = Field(
        default=64,
        ge=0,
        description=(
            "The sweeper rebuilds (REINDEX INDEX CONCURRENTLY, one worker process at a "
            "time) an index of jobs larger than this many MiB and than "
            "ATLAS_INDEX_REBUILD_BYTES_PER_ROW per live row: what a drained backlog "
            "leaves behind. 0 turns the rebuilds off."
        ),
    )
    index_rebuild_bytes_per_row: int = Field(
        default=512,
        gt=0,
        description="An index of jobs above this size per live row (and above "
        "ATLAS_INDEX_REBUILD_MIN_MB) is rebuilt; a fresh one takes 30-60 bytes per row.",
    )
    index_rebuild_check_seconds: float = Field(
        default=300.0,
        gt=0,
        description="How often each worker process's sweeper looks for an index to rebuild.",
    )
    vacuum_dead_rows: int = Field(
        default=50_000,
        ge=0,
        description=(
            "The sweeper runs VACUUM on jobs, job_history or attempts (one worker process at "
            "a time) once the table holds this many dead row versions, instead of waiting "
            "for autovacuum's next visit (autovacuum_naptime): under a fast churn the "
            "tables then hold this many dead versions, not a naptime's worth. 0 turns it off."
        ),
    )
    vacuum_check_seconds: float = Field(
        default=10.0,
        gt=0,
        description="How often each worker process's sweeper looks at the dead row counts.",
    )
    worker_heartbeat_seconds: float = Field(
        default=5.0,
        gt=0,
        description=(
            "How often each worker process writes its row of the worker registry "
            "(worker_processes: host, pid, concurrency, the kind@version keys it serves) "
            "-- one small statement per process per interval, beside the lease heartbeat."
        ),
    )
    worker_live_window_seconds: float = Field(
        default=15.0,
        gt=0,
        description=(
            "A worker process whose registry heartbeat is older than this is not live: "
            "GET /v1/kinds does not count it and a queued job only it could run shows "
            "waiting_for no_worker. Keep it about 3x ATLAS_WORKER_HEARTBEAT_SECONDS."
        ),
    )
    worker_forget_seconds: float = Field(
        default=3600.0,
        gt=0,
        description="The sweeper deletes a dead worker process's registry row this long "
        "after its last heartbeat (a cleanly stopped process deletes its own at once).",
    )
    live_workers_refresh_seconds: float = Field(
        default=2.0,
        gt=0,
        description=(
            "How often each API process reads the live workers per kind@version (one "
            "query, kept in memory): what waiting_for and GET /v1/kinds show, at most "
            "this old."
        ),
    )
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    startup_wait_seconds: float = Field(
        default=30.0,
        ge=0,
        description="serve/api/worker: how long to wait for an unreachable database at start.",
    )
    shutdown_drain_seconds: float = Field(
        default=3.0,
        ge=0,
        description=(
            "API on SIGTERM: how long /readyz answers 503 (held reads and streams ended) "
            "before the listener closes; part of shutdown_grace_seconds."
        ),
    )
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    batch_max_jobs: int = Field(
        default=100, gt=0, description="Most jobs one POST /v1/jobs:batch may create; more is 413."
    )
    max_wait_seconds: float = Field(default=30.0, ge=0, description="Cap for Prefer: wait=N.")
    signing_secret: str | None = Field(
        default=None, description="Secret for download URLs; generated under data_dir if unset."
    )
    download_url_ttl_seconds: int = Field(default=900, gt=0)
    ui_session_ttl_seconds: int = Field(
        default=8 * 3600,
        gt=0,
        description="A status-page login lasts this long (then the API key is asked again).",
    )
    ui_cookie_secure: bool = Field(
        default=False,
        description=(
            "Mark the status page's session cookie Secure even when the request arrived "
            "over plain HTTP (set it behind a TLS-terminating proxy); https requests "
            "always get Secure."
        ),
    )
    log_format: str = Field(default="console", pattern="^(console|json)$")
    log_level: str = Field(default="INFO")
    db_pool_size: int = Field(
        default=20,
        gt=0,
        description=(
            "API connections kept open (as many again may open under bursts, and are "
            "closed after each use: a new connection costs a TCP, TLS-probe and SCRAM "
            "handshake, so size this to the concurrent requests)."
        ),
    )
    api_key_cache_seconds: float = Field(
        default=5.0,
        ge=0,
        description=(
            "How long an API process trusts a successful API-key lookup without asking "
            "the database again: a revoked key is refused at most this long after its "
            "revocation (0: look every request's key up)."
        ),
    )
    api_key_cache_size: int = Field(
        default=10_000, ge=0, description="Most API-key lookups one API process remembers."
    )
    admission_max_active_per_owner: int | None = Field(
        default=10_000,
        gt=0,
        description="New jobs get 429 while the owner has this many unfinished jobs.",
    )
    schedule_min_interval_seconds: float = Field(
        default=10.0,
        ge=1,
        description="A schedule whose ticks come more often than this is refused (422 "
        "naming body.cron).",
    )
    schedule_max_per_owner: int | None = Field(
        default=100,
        gt=0,
        description="Most schedules one owner may have; one more is 409 "
        "too-many-schedules (unset: no limit).",
    )
    admission_max_queue_age_seconds: float | None = Field(
        default=None,
        gt=0,
        description="New jobs get 503 while the oldest claimable job waited longer than this.",
    )

    http_max_header_bytes: int = Field(
        default=64 * 1024,
        gt=1024,
        description="Largest request line + headers; beyond it 431 (or 400), connection closed.",
    )
    watch_max_per_key: int = Field(
        default=100,
        gt=0,
        description="Open long-polls + event streams per API key; beyond it 429.",
    )
    watch_max_total: int = Field(
        default=1000,
        gt=0,
        description="Open long-polls + event streams per API process; beyond it 503.",
    )
    http_limit_concurrency: int = Field(
        default=2000,
        gt=0,
        description=(
            "Open connections + tasks before new requests get 503; must exceed "
            "watch_max_total, the difference is the room left for ordinary requests."
        ),
    )
    http_keep_alive_seconds: int = Field(
        default=5, gt=0, description="An idle keep-alive connection is closed after this."
    )
    http_head_timeout_seconds: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Time to send a request line and headers, from the connection's start or a "
            "kept-alive request's first byte; a slower connection is closed unanswered."
        ),
    )
    http_body_timeout_seconds: float = Field(
        default=30.0,
        gt=0,
        description="Time to receive a whole request body; a slower client gets 408.",
    )
    review_scope: str = Field(
        default="owner",
        pattern="^(owner|global)$",
        description=(
            "Which jobs a reviewer may decide: its own owner's (another owner's job is "
            "404, as for any read), or every owner's."
        ),
    )
    review_four_eyes: bool = Field(
        default=False,
        description=(
            "Four-eyes reviews: an approval is refused (403 four-eyes) when it comes from "
            "the holder who submitted the job -- whichever of their keys they use -- or "
            "from a key that names no holder (keys create --holder). Rejections are not "
            "restricted."
        ),
    )
    metrics_token: str | None = Field(
        default=None,
        description="When set, GET /metrics needs 'Authorization: Bearer <token>'.",
    )
    result_store: str = Field(
        default="filesystem",
        pattern="^(filesystem|s3)$",
        description="Where result files live: under data_dir, or an S3-compatible bucket.",
    )
    s3_bucket: str | None = Field(default=None, description="Bucket of the s3 result store.")
    s3_endpoint_url: str | None = Field(
        default=None, description="S3-compatible endpoint (MinIO, moto, ...); unset: AWS."
    )
    s3_region: str = Field(default="us-east-1")
    s3_prefix: str = Field(default="", description="Key prefix inside the bucket.")
    metrics_sample_seconds: float = Field(
        default=15.0,
        gt=0,
        description="How often each API process samples the database-derived gauges.",
    )
    public_url: str | None = Field(
        default=None,
        description=(
            "Base of every absolute link the API hands out (download URLs); never taken "
            "from the request's Host header. Unset: derived from the bind address."
        ),
    )

    otel_enabled: bool = Field(
        default=False,
        description=(
            "OpenTelemetry tracing (needs the otel extra): spans exported over OTLP/HTTP "
            "as the standard OTEL_EXPORTER_OTLP_* variables say."
        ),
    )

    destinations: dict[str, Destination] = Field(
        default_factory=dict,
        description=(
            "The allow-list of external destinations, as JSON: name -> {url, "
            "timeout_seconds, concurrency, reconcile_checks, reconcile_interval_seconds, "
            "confirm_deadline_seconds}. Jobs name a destination, never a URL."
        ),
    )
    document_time_scale: float = Field(
        default=1.0, ge=0, description="Scales the simulated extract cost of document.publish."
    )

    @field_validator("destinations")
    @classmethod
    def _destination_names(cls, value: dict[str, Destination]) -> dict[str, Destination]:
        for name in value:
            if not re.match(DESTINATION_NAME, name):
                raise ValueError(f"destination name {name!r} must match {DESTINATION_NAME}")
        return value

    @model_validator(mode="after")
    def _s3_needs_a_bucket(self) -> Settings:
        if self.result_store == "s3" and not self.s3_bucket:
            raise ValueError("ATLAS_RESULT_STORE=s3 needs ATLAS_S3_BUCKET")
        return self

    @model_validator(mode="after")
    def _room_beside_watchers(self) -> Settings:
        if self.http_limit_concurrency <= self.watch_max_total:
            raise ValueError(
                "ATLAS_HTTP_LIMIT_CONCURRENCY must exceed ATLAS_WATCH_MAX_TOTAL: long-polls "
                "and event streams count as open connections too, and ordinary requests "
                "need room beside them"
            )
        return self

    @model_validator(mode="after")
    def _live_window_outlasts_a_beat(self) -> Settings:
        if self.worker_live_window_seconds <= self.worker_heartbeat_seconds:
            raise ValueError(
                "ATLAS_WORKER_LIVE_WINDOW_SECONDS must exceed "
                "ATLAS_WORKER_HEARTBEAT_SECONDS (about 3x): otherwise a live worker "
                "looks dead between two beats"
            )
        return self

    @field_validator("public_url")
    @classmethod
    def _public_url_is_a_base(cls, value: str | None) -> str | None:
        if value is None or value == "":
            return None
        parts = urlsplit(value)
        if parts.scheme not in {"http", "https"} or not parts.hostname:
            raise ValueError("ATLAS_PUBLIC_URL must be an http(s) URL with a host")
        if parts.query or parts.fragment or parts.username or parts.password:
            raise ValueError("ATLAS_PUBLIC_URL must not carry credentials, a query or a fragment")
        return value.rstrip("/")

    @property
    def webhook_hosts(self) -> tuple[list[str], list[str]]:
        """(allowed hosts, internal hosts allowed) from their comma-separated settings."""

        def split(value: str) -> list[str]:
            return [part.strip() for part in value.split(",") if part.strip()]

        return split(self.webhook_allowed_hosts), split(self.webhook_internal_hosts)

    @property
    def results_dir(self) -> Path:
        return self.data_dir / "results"

    @property
    def public_base_url(self) -> str:
        """The configured ``public_url``, else the API's default bind address."""
        return self.public_url or bind_url(DEFAULT_HOST, DEFAULT_PORT)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
