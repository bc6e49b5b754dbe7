"""A Hypothesis state machine that drives the live HTTP API at random while real worker
processes run, and checks every status it observes against the lifecycle model
(chaos scenario 11; also in the suite: ``tests/acceptance/test_api_state_machine.py``).

The model is :data:`atlas_jobs._app.lifecycle.EDGES` and nothing else: a job's observed states must
follow paths of that table (two observations of one job may be several moves apart,
so each later state must be *reachable* from the earlier one); a terminal state never
changes; every history row is an edge of the table, with increasing ``seq``; an answer
is never a 5xx. Per call, the answer must agree with the state it reports:

- ``POST /jobs``: ``202``, state ``queued``;
- ``POST /cancel``: ``202`` with ``cancel_requested``/``canceled``, or ``409`` with the
  state that won (terminal, never ``canceled``);
- ``GET /result``: ``200`` only when ``succeeded`` with delivery ``available``; else
  ``409`` (not ready) or ``410`` (expired);
- operator ``resume``/``fail``: ``202`` only from ``unresolved`` (into ``queued`` /
  ``failed``); ``replay``: ``202`` only of a terminal job, and it makes a *new* job;
- ``Prefer: wait`` reads and plain reads answer the same model.

The machine is synchronous (Hypothesis' stateful runner is): one ``httpx.Client`` per
key, bounded timeouts. :func:`configure` points it at a running service.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, ClassVar

import httpx
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    rule,
)

from atlas_jobs._app.lifecycle import EDGES, JobState, is_terminal

TERMINAL = frozenset(s.value for s in JobState if is_terminal(s))


def reachable() -> dict[str | None, frozenset[str]]:
    """Every state reachable from each state (itself included) along :data:`EDGES`."""
    states: list[str | None] = [None, *(s.value for s in JobState)]
    step: dict[str | None, set[str]] = {s: set() for s in states}
    for source, target in EDGES:
        step[None if source is None else source.value].add(target.value)
    closure: dict[str | None, frozenset[str]] = {}
    for start in states:
        seen = {start} if start is not None else set()
        todo = list(step[start])
        while todo:
            state = todo.pop()
            if state not in seen:
                seen.add(state)
                todo.extend(step[state])
        closure[start] = frozenset(s for s in seen if s is not None)
    return closure


REACHABLE = reachable()
EDGE_VALUES = frozenset((None if s is None else s.value, t.value) for s, t in EDGES)


@dataclass
class Target:
    """Where the machine sends its calls (set by :func:`configure`)."""

    url: str = ""
    client_key: str = ""
    operator_key: str = ""
    wait_seconds: int = 1
    observations: Counter[str] = field(default_factory=Counter)  # what was checked
    jobs: list[str] = field(default_factory=list)  # every job a 202 created


TARGET = Target()


def configure(url: str, client_key: str, operator_key: str) -> Target:
    TARGET.url, TARGET.client_key, TARGET.operator_key = url, client_key, operator_key
    TARGET.observations.clear()
    TARGET.jobs.clear()
    return TARGET


class ApiMachine(RuleBasedStateMachine):
    """Random API calls; the lifecycle model checked on every answer (module doc)."""

    jobs = Bundle("jobs")
    presets: ClassVar[list[str]] = ["coast", "reef", "squall"]

    def __init__(self) -> None:
        super().__init__()
        timeout = httpx.Timeout(30.0)
        self.client = httpx.Client(
            base_url=TARGET.url,
            headers={"Authorization": f"Bearer {TARGET.client_key}"},
            timeout=timeout,
        )
        self.operator = httpx.Client(
            base_url=TARGET.url,
            headers={"Authorization": f"Bearer {TARGET.operator_key}"},
            timeout=timeout,
        )
        self.last: dict[str, str] = {}  # job id -> last observed state

    def teardown(self) -> None:
        self.client.close()
        self.operator.close()

    # -- the model ------------------------------------------------------------------

    def observe(self, job: str, state: str, how: str) -> None:
        """``state`` was seen for ``job``: it must follow the table from the last one."""
        assert state in REACHABLE, f"{how}: unknown state {state!r}"
        before = self.last.get(job)
        allowed = REACHABLE[before] if before is not None else REACHABLE[None]
        assert state in allowed, f"{how}: {job} went {before} -> {state}, not in the table"
        if before in TERMINAL:
            assert state == before, f"{how}: terminal {before} changed to {state}"
        self.last[job] = state
        TARGET.observations[how] += 1

    @staticmethod
    def answered(response: httpx.Response, *allowed: int) -> httpx.Response:
        assert response.status_code < 500, f"{response.status_code}: {response.text[:500]}"
        assert response.status_code in allowed, f"{response.status_code}: {response.text[:500]}"
        if response.status_code >= 400:
            assert response.headers["content-type"].startswith("application/problem+json")
        return response

    # -- rules ----------------------------------------------------------------------

    @rule(target=jobs, preset=st.sampled_from(["coast", "reef", "squall", "noop"]))
    def create(self, preset: str) -> Any:
        body: dict[str, Any] = (
            {"kind": "atlas.noop", "input": {}}
            if preset == "noop"
            else {"kind": "atlas.bundle", "input": {"preset": preset, "pages": ["cover"]}}
        )
        answer = self.answered(self.client.post("/v1/jobs", json=body), 202)
        job: str = answer.json()["id"]
        assert answer.json()["state"] == "queued"
        self.observe(job, "queued", "create")
        TARGET.jobs.append(job)
        return job

    @rule(job=jobs)
    def status(self, job: str) -> None:
        answer = self.answered(self.client.get(f"/v1/jobs/{job}"), 200)
        self.observe(job, answer.json()["state"], "status")

    @rule(job=jobs)
    def long_poll(self, job: str) -> None:
        wait = {"Prefer": f"wait={TARGET.wait_seconds}"}
        answer = self.answered(self.client.get(f"/v1/jobs/{job}", headers=wait), 200)
        assert answer.headers.get("preference-applied") == f"wait={TARGET.wait_seconds}"
        self.observe(job, answer.json()["state"], "long-poll")

    @rule(job=jobs)
    def cancel(self, job: str) -> None:
        answer = self.answered(self.client.post(f"/v1/jobs/{job}/cancel"), 202, 409)
        body = answer.json()
        if answer.status_code == 202:
            state = body["state"]
            assert state in ("cancel_requested", "canceled"), body
        else:  # another ending won: the problem names it
            state = body["state"]
            assert state in {"succeeded", "failed", "unresolved"}, body
        self.observe(job, state, "cancel")

    @rule(job=jobs)
    def result(self, job: str) -> None:
        answer = self.answered(self.client.get(f"/v1/jobs/{job}/result"), 200, 409, 410)
        if answer.status_code == 200:
            self.observe(job, "succeeded", "result")

    @rule(job=jobs)
    def history(self, job: str) -> None:
        answer = self.answered(self.client.get(f"/v1/jobs/{job}/history"), 200)
        items = answer.json()["items"]
        assert items, "a job has at least its creation in history"
        seqs = [i["seq"] for i in items]
        assert seqs == sorted(set(seqs)), f"seq not strictly increasing: {seqs}"
        for item in items:
            edge = (item["from"], item["to"])
            # A refused request on a finished job (a late cancel) is recorded in place.
            recorded = item["from"] == item["to"] and item["from"] in TERMINAL
            assert edge in EDGE_VALUES or recorded, item
        TARGET.observations["history"] += 1

    @rule(job=jobs, action=st.sampled_from(["resume", "fail"]))
    def operator_decides(self, job: str, action: str) -> None:
        answer = self.answered(
            self.operator.post(f"/v1/jobs/{job}/{action}", json={"note": "chaos"}), 202, 409
        )
        if answer.status_code == 202:
            state = answer.json()["state"]
            assert state == ("queued" if action == "resume" else "failed"), answer.json()
            self.observe(job, state, action)

    @rule(job=jobs)
    def replay(self, job: str) -> None:
        """The new job is observed here and settled at the end, but not added to the
        ``jobs`` bundle: whether a replay happens (202) or not (409: the source is not
        finished yet) depends on the workers' timing, and a bundle whose size depends on
        it makes Hypothesis's replay of an example draw differently (it reports
        ``FlakyStrategyDefinition`` and hides any real finding)."""
        answer = self.answered(
            self.operator.post(f"/v1/jobs/{job}/replay", json={"note": "chaos"}), 202, 409
        )
        if answer.status_code != 202:
            return
        fresh: str = answer.json()["id"]
        assert fresh != job, "a replay is a new job"
        source = self.answered(self.client.get(f"/v1/jobs/{job}"), 200).json()["state"]
        assert source in TERMINAL, f"replayed a {source} job"
        self.observe(job, source, "replay source")
        self.observe(fresh, answer.json()["state"], "replay")
        TARGET.jobs.append(fresh)
        status = self.answered(self.client.get(f"/v1/jobs/{fresh}"), 200)
        self.observe(fresh, status.json()["state"], "status")

    @invariant()
    def terminal_jobs_stay_terminal(self) -> None:
        for job, state in list(self.last.items())[-3:]:
            if state in TERMINAL:
                answer = self.answered(self.client.get(f"/v1/jobs/{job}"), 200)
                assert answer.json()["state"] == state, (job, state, answer.json()["state"])
