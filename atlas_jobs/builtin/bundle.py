"""``atlas.bundle`` (the reference kind): validate -> build tiles -> package -> publish.

Written on the public API alone, as an example. The input names a preset; presets are
data (:data:`PRESETS`): ``coast`` succeeds, ``reef`` fails permanently while building,
``squall`` fails transiently twice and then succeeds. Unit costs are seconds at time scale
1.0 (``ATLAS_BUNDLE_TIME_SCALE`` scales them): ``coast`` then takes validate 2 s, build
9 s, package 2 s, publish 1 s -- 14 s from claim to ``succeeded``.

Every unit is recorded done, so a retried attempt skips what an earlier one finished
(when its file still exists), and every output is a pure function of the job (id, input),
so a unit run twice writes identical bytes. Building the first two tiles discovers the
companions they need: the build stage's total grows from 4 to 6 (plan revision 2).
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from atlas_jobs import Context, PermanentError, Result, RetryPolicy, Stage, TransientError, kind


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


MANIFEST, ARCHIVE = PACKAGE_ACTIONS
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)
TIME_SCALE_VARIABLE = "ATLAS_BUNDLE_TIME_SCALE"


def time_scale() -> float:
    """The factor of every simulated cost (``ATLAS_BUNDLE_TIME_SCALE``, default 1.0)."""
    return float(os.environ.get(TIME_SCALE_VARIABLE) or 1.0)


@kind(
    "atlas.bundle",
    version=1,
    input=BundleInput,
    description="Builds a text tile bundle from a preset: validate, build, package, publish.",
    stages=[Stage("validate", "checks"), Stage("build", "tiles"), Stage("package", "actions")],
    retry=RetryPolicy(
        attempts=5, max_elapsed_seconds=3600, backoff_base_seconds=0.5, backoff_cap_seconds=30
    ),
    timeout=300,
)
async def bundle(ctx: Context[BundleInput]) -> Result:
    spec = ctx.input
    preset = PRESETS[spec.preset]
    plan = tile_plan(spec.pages)
    scale = time_scale()
    await ctx.plan(
        validate=len(VALIDATION_CHECKS), build=len(plan.initial), package=len(PACKAGE_ACTIONS)
    )

    await ctx.enter("validate")
    for check in VALIDATION_CHECKS:
        if ctx.is_done("validate", check):
            continue
        await ctx.safe_point()
        await ctx.sleep(preset.validate_cost * scale)
        await ctx.unit_done("validate", check)

    await ctx.enter("build")
    discover_at = min(DISCOVER_AFTER_TILES, len(plan.initial))
    for index, tile in enumerate(plan.full):
        if index == discover_at and plan.companions:
            # Building the first tiles reveals the companions they need. Idempotent:
            # a retried attempt finds the plan already expanded and keeps it.
            await ctx.safe_point()
            await ctx.expand_plan("build", len(plan.full))
        name = tile_file(tile)
        done = ctx.is_done("build", tile)
        if done and await ctx.has_file(name):
            continue
        await ctx.safe_point()
        await ctx.sleep(preset.tile_cost * scale)
        _simulate_failures(ctx, preset, tile, spec)
        await ctx.write_file(name, tile_text(ctx, spec, tile))
        # A tile recorded done whose file is gone (an earlier attempt's publication moved
        # the private files, then died before its commit) is rebuilt byte-identical; its
        # record already moved the outputs on (to partial, perhaps to complete), and
        # asking for partial again would be a move backwards, which the engine refuses.
        await ctx.unit_done("build", tile, outputs=None if done else "partial")

    await ctx.enter("package")
    files = [tile_file(t) for t in plan.full]
    if not (ctx.is_done("package", MANIFEST) and await ctx.has_file(MANIFEST)):
        await ctx.safe_point()
        await ctx.sleep(preset.package_cost * scale)
        manifest = {"job_id": str(ctx.job_id), "format": spec.format, "files": files}
        await ctx.write_file(MANIFEST, json.dumps(manifest, indent=2).encode() + b"\n")
        await ctx.unit_done("package", MANIFEST)
    if not (ctx.is_done("package", ARCHIVE) and await ctx.has_file(ARCHIVE)):
        await ctx.safe_point()
        await ctx.sleep(preset.package_cost * scale)
        contents = {name: await ctx.read_file(name) for name in [*files, MANIFEST]}
        await ctx.write_file(ARCHIVE, zip_bytes(contents))
        await ctx.unit_done("package", ARCHIVE, outputs="complete")
    else:
        await ctx.outputs_complete()

    await ctx.safe_point()  # a cancel before publication begins wins
    await ctx.begin_publication()  # from here on a cancel loses
    await ctx.sleep(preset.publish_cost * scale)
    return Result(files=True)


def tile_file(tile: str) -> str:
    return f"{tile}.txt"


def tile_text(ctx: Context[BundleInput], spec: BundleInput, tile: str) -> bytes:
    """A tile's text: deterministic, so a rebuilt tile is byte-identical."""
    page = tile.split("-", 1)[0]
    return (
        f"Atlas tile {tile}\npage: {page}\npreset: {spec.preset.value}\n"
        f"job: {ctx.job_id}\nformat: {spec.format}\n"
    ).encode()


def zip_bytes(contents: dict[str, bytes]) -> bytes:
    """A reproducible zip (fixed timestamps, sorted names): same inputs, same bytes."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(contents):
            info = zipfile.ZipInfo(name, date_time=_ZIP_EPOCH)
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, contents[name])
    return buffer.getvalue()


def _simulate_failures(
    ctx: Context[BundleInput], preset: PresetSpec, tile: str, spec: BundleInput
) -> None:
    if tile == preset.permanent_failure_tile:
        raise PermanentError(
            "tile_unbuildable",
            f"tile {tile} cannot be built from preset {spec.preset.value}",
        )
    if tile == preset.transient_failure_tile and ctx.attempt <= preset.transient_failures:
        raise TransientError(
            "tile_source_unavailable",
            f"the source of tile {tile} is temporarily unavailable (attempt {ctx.attempt})",
        )
