"""The rules a row of ``jobs`` must keep: ONE CHECK constraint calling ONE function.

PostgreSQL reads every CHECK constraint of a table from its stored node tree and plans it
again on every statement that writes the table (``ExecRelCheck``: ``stringToNode``, then
``expression_planner`` and ``ExecPrepareExpr``). ``jobs`` had eleven, a large part of
the server's CPU on a one-job create. Here they are the arms of an
IMMUTABLE PL/pgSQL function, which a session plans once; the table's one constraint
(``ck_jobs_rules``) stores that call. (Not ``LANGUAGE sql``: an SQL function is inlined
into the expression, and so re-read and re-planned with it.)

The price is a PL/pgSQL call per row, a little more than the eleven inline expressions
of ``jobs`` cost per row: one-job statements cost less, large batches slightly more.
Not for ``job_history`` and ``attempts`` (two small CHECKs each): there the call costs
more per row than the inline pair, and batches are their common case. (The figures,
from ``benchmarks/trigger_cpu.py``: docs/performance.md, "Figures behind the code".)

Diagnostics are kept: a row that breaks a rule is refused with ``check_violation``
(SQLSTATE 23514) naming the rule's former constraint -- ``new row for relation "jobs"
violates check constraint "ck_jobs_lease_iff_active"``, that name also in the error's
CONSTRAINT field -- as PostgreSQL itself worded it. Unlike PostgreSQL's own message there
is no "Failing row contains ..." detail: a job's row holds its input.

Each rule is a SQL boolean over the function's parameters, with SQL's three-valued logic
kept: as a CHECK, a rule that is NULL passes (``IS NOT FALSE`` below). A row that keeps
every rule -- nearly every row -- costs the function one expression; only a refused one
walks the rules one by one, in their order here, to name the first it breaks.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from atlas_jobs._app.lifecycle import (
    ALL_DELIVERY_STATES,
    ALL_STATES,
    STATE_REASONS,
    TERMINAL_STATES,
    DeliveryState,
    JobState,
)


def sql_list(values: Iterable[str]) -> str:
    """A SQL literal list of constant vocabulary values (never user input)."""
    return ", ".join(f"'{v}'" for v in sorted(values))


def state_reason_rule(state: str, reason: str) -> str:
    """Whether ``reason`` is one ``STATE_REASONS`` allows in ``state`` (two SQL names)."""
    arms = [
        f"({state} = '{s}' AND {reason} IN ({sql_list(reasons)}))"
        for s, reasons in sorted(STATE_REASONS.items())
    ]
    return " OR ".join(arms)


@dataclass(frozen=True)
class Parameter:
    """One parameter of a rules function and what the constraint passes for it."""

    name: str
    type: str
    argument: str


@dataclass(frozen=True)
class RowRules:
    """A table's rules: ``(former constraint name without ck_<table>_, rule)`` in the
    order they are checked, over ``parameters``."""

    table: str
    parameters: tuple[Parameter, ...]
    rules: tuple[tuple[str, str], ...]

    @property
    def function(self) -> str:
        return f"atlas_{self.table}_fits"

    @property
    def check(self) -> str:
        """The constraint's expression: one call."""
        return f"{self.function}({', '.join(p.argument for p in self.parameters)})"

    def constraint(self, name: str) -> str:
        return f"ck_{self.table}_{name}"

    def create_function(self) -> str:
        """``CREATE FUNCTION``: true, or a ``check_violation`` naming the broken rule."""
        signature = ", ".join(f"{p.name} {p.type}" for p in self.parameters)
        fits = "\n       AND ".join(f"({rule}) IS NOT FALSE" for _, rule in self.rules)
        refusals = "".join(self._refusal(name, rule) for name, rule in self.rules)
        return (
            f"CREATE FUNCTION {self.function}({signature})\n"
            "RETURNS boolean LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$\nBEGIN\n"
            f"    IF {fits} THEN\n        RETURN true;\n    END IF;\n"
            f"{refusals}    RETURN true;\nEND\n$$"
        )

    def _refusal(self, name: str, rule: str) -> str:
        constraint = self.constraint(name)
        message = f'new row for relation "{self.table}" violates check constraint "{constraint}"'
        return (
            f"    IF ({rule}) IS FALSE THEN\n"
            f"        RAISE EXCEPTION USING ERRCODE = 'check_violation', "
            f"TABLE = '{self.table}',\n"
            f"            CONSTRAINT = '{constraint}', MESSAGE = '{message}';\n"
            "    END IF;\n"
        )


RULES_NAME = "rules"  # the table's one constraint: ck_<table>_rules

_PUBLISHED = f"'{DeliveryState.AVAILABLE}', '{DeliveryState.EXPIRED}'"
_ACTIVE = f"'{JobState.RUNNING}', '{JobState.CANCEL_REQUESTED}'"

# The nullable columns a rule only asks about are passed as ``IS NOT NULL``: a document
# is never handed to the function, only whether there is one.
JOB_RULES = RowRules(
    table="jobs",
    parameters=(
        Parameter("p_state", "text", "state"),
        Parameter("p_reason", "text", "reason"),
        Parameter("p_delivery", "text", "delivery_state"),
        Parameter("p_finished", "boolean", "finished_at IS NOT NULL"),
        Parameter("p_result", "boolean", "result_ref IS NOT NULL"),
        Parameter("p_attempt_id", "boolean", "current_attempt_id IS NOT NULL"),
        Parameter("p_lease", "boolean", "lease_expires_at IS NOT NULL"),
        Parameter("p_wait_deadline", "boolean", "wait_deadline_at IS NOT NULL"),
        Parameter("p_wait_on", "text", "wait_on_deadline"),
        Parameter("p_error", "boolean", "error IS NOT NULL"),
        Parameter("p_attempt", "integer", "attempt"),
        Parameter("p_charged", "integer", "charged_attempts"),
        Parameter("p_max_attempts", "integer", "max_attempts"),
        Parameter("p_plan_revision", "integer", "plan_revision"),
    ),
    # The vocabulary first, then the former constraints' (alphabetical) order.
    rules=(
        ("state_known", f"p_state IN ({sql_list(ALL_STATES)})"),
        ("delivery_state_known", f"p_delivery IN ({sql_list(ALL_DELIVERY_STATES)})"),
        ("reason_matches_state", state_reason_rule("p_state", "p_reason")),
        (
            "blocked_only_when_abandoned",
            f"p_delivery <> '{DeliveryState.BLOCKED}' "
            f"OR p_state IN ('{JobState.FAILED}', '{JobState.CANCELED}')",
        ),
        (
            "counters_nonnegative",
            "p_attempt >= 0 AND p_charged >= 0 AND p_max_attempts >= 1 AND p_plan_revision >= 0",
        ),
        ("failed_has_error", f"p_state <> '{JobState.FAILED}' OR p_error"),
        # Both halves separately: a job no worker holds carries neither a lease nor a
        # fencing token (a stray attempt id on a queued job would outlive its attempt).
        (
            "lease_iff_active",
            f"(p_state IN ({_ACTIVE})) = p_attempt_id AND (p_state IN ({_ACTIVE})) = p_lease",
        ),
        (
            "published_only_when_succeeded",
            f"p_delivery NOT IN ({_PUBLISHED}) OR (p_state = '{JobState.SUCCEEDED}' AND p_result)",
        ),
        (
            "succeeded_has_published",
            f"p_state <> '{JobState.SUCCEEDED}' OR p_delivery IN ({_PUBLISHED})",
        ),
        ("terminal_iff_finished", f"(p_state IN ({sql_list(TERMINAL_STATES)})) = p_finished"),
        (
            "waiting_has_deadline",
            f"p_state <> '{JobState.WAITING}' "
            "OR (p_wait_deadline AND p_wait_on IN ('escalate', 'fail'))",
        ),
    ),
)
