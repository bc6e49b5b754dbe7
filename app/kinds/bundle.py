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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class Preset(StrEnum):
    """A simulated bundle's behaviour (presets are data)."""

    COAST = "coast"
    REEF = "reef"
    SQUALL = "squall"


class Page(StrEnum):
    """A page of the bundle; each plans its own tiles."""

    COVER = "cover"
    SUMMARY = "summary"


def _without_default(schema: dict[str, Any]) -> None:
    schema.pop("default", None)


class BundleInput(BaseModel):
    """Input of `atlas.bundle`: `{"preset": "coast", "pages": ["cover", "summary"],
    "format": "text-bundle-v1"}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    preset: Preset = Field(
        description="Which simulated bundle: `coast` succeeds, `reef` fails permanently "
        "while building, `squall` fails transiently twice and then succeeds."
    )
    pages: list[Page] = Field(
        min_length=1,
        max_length=2,
        description="The pages to build, each at most once.",
        json_schema_extra={"uniqueItems": True},
    )
    format: Literal["text-bundle-v1"] = Field(
        default="text-bundle-v1",
        description="The bundle format; optional, `text-bundle-v1` when left out.",
        # No `default` in the schema: generators would then type the field as always
        # present (openapi-typescript) although a client may leave it out.
        json_schema_extra=_without_default,
    )

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
