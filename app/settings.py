"""Configuration from the environment (12-factor), with documented defaults."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every knob the service reads. Each field is documented in the README."""

    model_config = SettingsConfigDict(env_prefix="ATLAS_", extra="ignore")

    database_url: str | None = Field(
        default=None,
        validation_alias="DATABASE_URL",
        description="PostgreSQL 15+ URL; unset means the embedded server under data_dir.",
    )
    data_dir: Path = Field(default=Path(".atlas"), description="Embedded database and results.")
    result_ttl_seconds: float = Field(default=86400.0, gt=0, description="Result retention.")
    lease_seconds: float = Field(default=30.0, gt=0, description="Worker lease length.")
    bundle_time_scale: float = Field(default=1.0, ge=0, description="Scales simulated unit costs.")
    reaper_interval_seconds: float = Field(default=5.0, gt=0)
    sweeper_interval_seconds: float = Field(default=10.0, gt=0)
    poll_interval_seconds: float = Field(default=2.0, gt=0, description="Fallback claim poll.")
    shutdown_grace_seconds: float = Field(default=10.0, ge=0)
    max_body_bytes: int = Field(default=1024 * 1024, gt=0)
    max_wait_seconds: float = Field(default=30.0, ge=0, description="Cap for Prefer: wait=N.")
    signing_secret: str | None = Field(
        default=None, description="Secret for download URLs; generated under data_dir if unset."
    )
    download_url_ttl_seconds: int = Field(default=900, gt=0)
    log_format: str = Field(default="console", pattern="^(console|json)$")
    log_level: str = Field(default="INFO")
    db_pool_size: int = Field(default=10, gt=0)
    admission_max_active_per_owner: int | None = Field(
        default=10_000,
        gt=0,
        description="New jobs get 429 while the owner has this many unfinished jobs.",
    )
    admission_max_queue_age_seconds: float | None = Field(
        default=None,
        gt=0,
        description="New jobs get 503 while the oldest claimable job waited longer than this.",
    )

    @property
    def results_dir(self) -> Path:
        return self.data_dir / "results"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
