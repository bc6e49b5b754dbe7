"""``atlas.bundle`` (SPEC section 4): input model and presets, as data.

Unit costs are seconds at time scale 1.0; ``ATLAS_BUNDLE_TIME_SCALE`` scales them.
At 1.0 ``coast`` reproduces the seed timeline: validate 2 s, build 9 s, package 2 s,
publish 1 s -- 14 s from claim to ``succeeded``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Preset(StrEnum):
    COAST = "coast"
    REEF = "reef"
    SQUALL = "squall"


class Page(StrEnum):
    COVER = "cover"
    SUMMARY = "summary"


class BundleInput(BaseModel):
    """Input of ``atlas.bundle``: ``{"preset": "coast", "pages": [...], "format": ...}``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Preset
    pages: list[Page] = Field(min_length=1, max_length=2, json_schema_extra={"uniqueItems": True})
    format: Literal["text-bundle-v1"] = "text-bundle-v1"

    @field_validator("pages")
    @classmethod
    def _pages_are_distinct(cls, pages: list[Page]) -> list[Page]:
        """A page named twice would plan its tiles twice (and a job would end
        ``succeeded`` showing 3 of 6 tiles): refused, never silently deduplicated."""
        if len(set(pages)) != len(pages):
            raise ValueError("pages must not repeat a page")
        return pages


VALIDATION_CHECKS: tuple[str, ...] = ("schema", "preset", "pages", "format")
PACKAGE_ACTIONS: tuple[str, ...] = ("manifest.json", "bundle.zip")

# Tiles planned at revision 1, per page, and the companions building discovers.
PLANNED_TILES: Mapping[Page, tuple[str, ...]] = MappingProxyType(
    {
        Page.COVER: ("cover-title", "cover-key"),
        Page.SUMMARY: ("summary-counts", "summary-notes"),
    }
)
COMPANION_TILES: Mapping[Page, tuple[str, ...]] = MappingProxyType(
    {Page.COVER: ("cover-legend",), Page.SUMMARY: ("summary-source",)}
)
DISCOVER_AFTER_TILES = 2
"""The plan expands after this many tiles are built ("2 of 6 tiles; plan expanded")."""


@dataclass(frozen=True, slots=True)
class PresetSpec:
    """How a preset behaves. Costs in seconds at time scale 1.0."""

    validate_cost: float = 0.5  # per check: 4 checks = 2 s
    tile_cost: float = 1.5  # per tile: 6 tiles = 9 s
    package_cost: float = 1.0  # per action: 2 actions = 2 s
    publish_cost: float = 1.0
    permanent_failure_tile: str | None = None
    transient_failure_tile: str | None = None
    transient_failures: int = 0


PRESETS: Mapping[Preset, PresetSpec] = MappingProxyType(
    {
        Preset.COAST: PresetSpec(),
        Preset.REEF: PresetSpec(permanent_failure_tile="summary-source"),
        Preset.SQUALL: PresetSpec(transient_failure_tile="summary-notes", transient_failures=2),
    }
)


@dataclass(frozen=True, slots=True)
class TilePlan:
    initial: tuple[str, ...]
    companions: tuple[str, ...] = field(default_factory=tuple)

    @property
    def full(self) -> tuple[str, ...]:
        return self.initial + self.companions


def tile_plan(pages: list[Page]) -> TilePlan:
    initial = tuple(t for p in pages for t in PLANNED_TILES[p])
    companions = tuple(t for p in pages for t in COMPANION_TILES[p])
    return TilePlan(initial, companions)
