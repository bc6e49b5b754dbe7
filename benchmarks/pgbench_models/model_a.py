"""Model A's pgbench script, rendered from the product's own statements.

``python -m benchmarks.pgbench_models.model_a > model_a.sql`` (``run.sh`` does it for
every run): the worker's claim (``claim_to_run``) and the completer's group publication
(``publish_brief``, :meth:`atlas_jobs._app.transitions.Transitions.publish_many`), taken
from :func:`atlas_jobs._app.db.render_sql.render` -- the statements the code builds, so
the model follows every change of them. Only what pgbench needs is rewritten: the bound
parameters become literals (clock offset 0, worker ``bench-w``, lease 30 s, result TTL
86400 s, the no-op kind), the claim's ``LIMIT`` the pgbench variable ``:batch``, and the
claim's final ``SELECT`` aggregates the ids and attempt ids into pgbench variables
(``\\gset``) that the publication binds as its arrays.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from atlas_jobs._app.db import render_sql

WORKER = "bench-w"
KIND_KEY = "atlas.noop@1"
LEASE_SECONDS = 30
TTL_SECONDS = 86400

HEADER = """\
-- Model A: the worker's drain SQL on the real schema, per batch of N (-D batch=N),
-- rendered from the product by `python -m benchmarks.pgbench_models.model_a`: the claim
-- (claim_to_run: jobs UPDATE + attempts INSERT + 'claim' history row, one autocommitted
-- statement), then the group publication (publish_brief, as Transitions.publish_many
-- sends it for the completer: lock, jobs UPDATE, attempt end, 'publish' history row, one
-- autocommitted statement). Bound parameters are inlined; the claim's final SELECT
-- aggregates ids and attempt ids (and reads the input) instead of returning the rows.
"""

CLAIM_SELECT = """\
SELECT string_agg(id::text, ',' ORDER BY seq) AS ids,
       string_agg(current_attempt_id::text, ',' ORDER BY seq) AS aids,
       sum(octet_length(input::text)) AS bytes
  FROM {rows} \\gset"""

_CLAIM_BINDS: Mapping[str, str] = {
    "clock_offset": "0",
    "handlers": f"'{{{KIND_KEY}}}'",
    "limit": ":batch",
    "worker_id": f"'{WORKER}'",
    "lease_seconds": str(LEASE_SECONDS),
    "actor": f"'worker:{WORKER}'",
}

_PUBLISH_BINDS: Mapping[str, str] = {
    "clock_offset": "0",
    "owner": "NULL",
    "actor": f"'worker:{WORKER}'",
    "p_job_id": "'{:ids}'",
    "p_attempt_id": "'{:aids}'",
    "p_seconds": f"array_fill(CAST({TTL_SECONDS} AS float8), ARRAY[:batch])",
    "p_result_ref": """array_fill(CAST('{"files": []}' AS jsonb), ARRAY[:batch])""",
}
"""Every other step array of the publication is NULL (unnest pads it with NULLs)."""

_BIND = re.compile(r"(?<![:\w]):([a-z_]+)\b")


def _inline(statement: str, binds: Mapping[str, str], *, rest: str | None = None) -> str:
    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in binds:
            return binds[name]
        if rest is None:
            raise KeyError(f"no value for :{name}")
        return rest

    return _BIND.sub(one, statement)


def render() -> str:
    statements = {block.name: block.sql for block in render_sql.blocks(render_sql.render())}
    writes, answer = statements["claim_to_run"].rsplit("\nSELECT ", 1)
    found = re.search(r"\bFROM (\w+)", answer)  # the CTE of the claimed rows
    if found is None:
        raise ValueError("claim_to_run: no FROM in its final SELECT")
    claim = _inline(writes, _CLAIM_BINDS) + "\n" + CLAIM_SELECT.format(rows=found.group(1))
    publish = _inline(statements["publish_brief"], _PUBLISH_BINDS, rest="NULL")
    # pgbench reads a script line by line: drop the statements' comment lines.
    lines = [
        line for line in f"{claim}\n{publish};".split("\n") if not line.lstrip().startswith("--")
    ]
    return HEADER + "\n".join(lines) + "\n"


if __name__ == "__main__":  # pragma: no cover
    print(render(), end="")
