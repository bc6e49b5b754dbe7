"""demo.gated: runs until the gate file exists."""

from pathlib import Path

from pydantic import BaseModel

from atlas_jobs import Context, Result, kind

GATE = Path('/work/wt-ops-b/.tmp-pytest/test_a_paused_kind_stays_queue0/gate')


class Gated(BaseModel):
    n: int


@kind("demo.gated", version=1, input=Gated, timeout=120)
async def gated(ctx: Context[Gated]) -> Result:
    while not GATE.exists():
        await ctx.sleep(0.05)
    return Result(reference={"n": ctx.input.n})
