"""``atlas.bundle`` v1 (SPEC section 4): validate -> build tiles -> package -> publish.

Behaviour comes from the preset data in :mod:`atlas_jobs._app.kinds.bundle`; unit costs are scaled
by ``ATLAS_BUNDLE_TIME_SCALE``. Every unit is checkpointed, so a retried attempt skips
what an earlier attempt finished (when its staged file still exists). Every output is a
pure function of the job (id, input), so a unit run twice writes identical bytes.
"""

from __future__ import annotations

import io
import json
import zipfile

from pydantic import ValidationError

from atlas_jobs._app.kinds.bundle import (
    DISCOVER_AFTER_TILES,
    PACKAGE_ACTIONS,
    PRESETS,
    VALIDATION_CHECKS,
    BundleInput,
    PresetSpec,
    tile_plan,
)
from atlas_jobs._app.lifecycle import DeliveryState
from atlas_jobs._workers.context import JobContext
from atlas_jobs._workers.errors import PermanentError, RecoverableError
from atlas_jobs._workers.handlers.base import PublishPlan

MANIFEST, ARCHIVE = PACKAGE_ACTIONS
_ZIP_EPOCH = (1980, 1, 1, 0, 0, 0)


async def run(ctx: JobContext) -> PublishPlan:
    try:
        spec = BundleInput.model_validate(ctx.input)
    except ValidationError as exc:
        raise PermanentError("invalid_input", "the input does not match atlas.bundle v1") from exc
    preset = PRESETS[spec.preset]
    plan = tile_plan(spec.pages)
    scale = ctx.settings.bundle_time_scale
    await ctx.load_checkpoints()
    await ctx.set_plan(
        [
            ("validate", "checks", len(VALIDATION_CHECKS)),
            ("build", "tiles", len(plan.initial)),
            ("package", "actions", len(PACKAGE_ACTIONS)),
        ]
    )

    await ctx.enter_stage("validate")
    for check in VALIDATION_CHECKS:
        if ctx.done("validate", check):
            continue
        await ctx.safe_point()
        await ctx.sleep(preset.validate_cost * scale)
        await ctx.checkpoint("validate", check)

    await ctx.enter_stage("build")
    discover_at = min(DISCOVER_AFTER_TILES, len(plan.initial))
    for index, tile in enumerate(plan.full):
        if index == discover_at and plan.companions:
            # Building the first tiles reveals the companions they need. Idempotent:
            # a retried attempt finds the plan already expanded and keeps it.
            await ctx.safe_point()
            await ctx.expand_plan("build", len(plan.full))
        name = tile_file(tile)
        checkpointed = ctx.done("build", tile)
        if checkpointed and await ctx.has_file(name):
            continue
        await ctx.safe_point()
        await ctx.sleep(preset.tile_cost * scale)
        _simulate_failures(ctx, preset, tile, spec)
        await ctx.write_file(name, tile_text(ctx, spec, tile))
        # A checkpointed tile whose file is gone (an earlier attempt's publication moved
        # the staged files, then died before its commit) is rebuilt byte-identical; its
        # checkpoint already moved delivery (to partial, perhaps on to staged), and asking
        # for partial again would be a move backwards, which the lifecycle refuses.
        await ctx.checkpoint(
            "build", tile, delivery=None if checkpointed else DeliveryState.PARTIAL_PRIVATE
        )

    await ctx.enter_stage("package")
    files = [tile_file(t) for t in plan.full]
    if not (ctx.done("package", MANIFEST) and await ctx.has_file(MANIFEST)):
        await ctx.safe_point()
        await ctx.sleep(preset.package_cost * scale)
        manifest = {"job_id": str(ctx.job_id), "format": spec.format, "files": files}
        await ctx.write_file(MANIFEST, json.dumps(manifest, indent=2).encode() + b"\n")
        await ctx.checkpoint("package", MANIFEST)
    if not (ctx.done("package", ARCHIVE) and await ctx.has_file(ARCHIVE)):
        await ctx.safe_point()
        await ctx.sleep(preset.package_cost * scale)
        contents = {name: await ctx.read_file(name) for name in [*files, MANIFEST]}
        await ctx.write_file(ARCHIVE, zip_bytes(contents))
        await ctx.checkpoint("package", ARCHIVE, delivery=DeliveryState.STAGED_PRIVATE)
    else:
        await ctx.stage_output(DeliveryState.STAGED_PRIVATE)

    return PublishPlan(files=True, hold_seconds=preset.publish_cost * scale, announce=True)


def tile_file(tile: str) -> str:
    return f"{tile}.txt"


def tile_text(ctx: JobContext, spec: BundleInput, tile: str) -> bytes:
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


def _simulate_failures(ctx: JobContext, preset: PresetSpec, tile: str, spec: BundleInput) -> None:
    if tile == preset.permanent_failure_tile:
        raise PermanentError(
            "tile_unbuildable",
            f"tile {tile} cannot be built from preset {spec.preset.value}",
        )
    if tile == preset.transient_failure_tile and ctx.attempt <= preset.transient_failures:
        raise RecoverableError(
            "tile_source_unavailable",
            f"the source of tile {tile} is temporarily unavailable (attempt {ctx.attempt})",
        )
