"""``make bench`` runs end to end with tiny sizes and reports every figure.

Not a timing test: it checks that the suite starts its servers and load generator,
measures every section, prints the table with each ratio and writes well-formed JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import REPO, Server

TINY = {
    "BENCH_HTTP_REQUESTS": "40",
    "BENCH_HTTP_WARMUP": "5",
    "BENCH_HTTP_CONCURRENCY": "4",
    "BENCH_CLAIM_SIZES": "50,200",
    "BENCH_CLAIMS": "5",
    "BENCH_CLAIM_LIMIT": "4",
    "BENCH_CHURN_SIZES": "100,300",
    "BENCH_CHURN_BATCH": "40",
    "BENCH_BUDGET_SECONDS": "600",
    "BENCH_KIND_JOBS": "200",
    "BENCH_KIND_LATENCY_JOBS": "10",
    "BENCH_KIND_ROUNDS": "1",
    "BENCH_FAIR_SAMPLES": "5",
    "BENCH_FAIR_BACKLOG": "300",
    "BENCH_SEARCH_SMALL": "2000",
    "BENCH_SEARCH_LARGE": "6000",
    "BENCH_CHARTS_JOBS": "20000",
    "BENCH_CHARTS_HISTORY": "20000",
    "BENCH_CHARTS_RECENT": "2000",
    "BENCH_CHARTS_REPEATS": "5",
    "BENCH_BULK_JOBS": "300",
    # The peer harness (outside the repository, two minutes) has its own test:
    # tests/bench/test_peer_section.py.
    "BENCH_PEER_HARNESS": "/nonexistent/peer-harness",
}
HTTP_PAIRS = ("create", "create_idempotent", "status_200", "status_304")


def _run_suite(
    pg_server: Server, tmp_path: Path, results_dir: Path, **knobs: str
) -> subprocess.CompletedProcess[str]:
    """``python -m benchmarks.suite`` at the tiny sizes (plus ``knobs``); it must exit 0."""
    env = {
        **os.environ,
        **TINY,
        **knobs,
        "DATABASE_URL": pg_server.admin_url,
        "BENCH_RESULTS_DIR": str(results_dir),
        "ATLAS_DATA_DIR": str(tmp_path / "data"),
    }
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks.suite"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return done


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_the_suite_reports_every_figure(pg_server: Server, tmp_path: Path) -> None:
    results_dir = tmp_path / "results"
    done = _run_suite(pg_server, tmp_path, results_dir)

    (path,) = results_dir.glob("bench-*.json")
    report = json.loads(path.read_text())
    assert path.name == f"bench-{report['run']}.json"
    assert {"run", "started_at", "seconds", "environment", "knobs", "results", "goals"} <= set(
        report
    )

    http = report["results"]["http"]
    assert set(http) == set(HTTP_PAIRS)
    for pair in http.values():
        for side in ("atlas", "bare"):
            figures = pair[side]
            assert figures["requests"] == 40
            assert figures["unexpected"] == 0
            assert figures["rps"] > 0
            assert 0 < figures["p50_ms"] <= figures["p99_ms"]
        assert pair["ratio"] > 0
    assert set(http["status_304"]["atlas"]["statuses"]) == {"304"}
    assert set(http["create"]["atlas"]["statuses"]) == {"202"}

    kinds = report["results"]["kinds"]
    for side in ("kind", "engine"):
        assert len(kinds["drain_jobs_per_sec"][side]) == 1
        assert kinds["drain_jobs_per_sec"][side][0] > 0
        assert kinds["pickup_p50_ms"][side][0] > 0
    assert kinds["drain_ratio"] > 0
    assert kinds["pickup_ratio"] > 0
    keyed = kinds["keyed"]
    assert keyed["jobs"] == 200
    assert (keyed["owners"], keyed["priorities"]) == (10, 10)
    assert len(keyed["drain_jobs_per_sec"]) == 1
    assert keyed["drain_jobs_per_sec"][0] > 0
    assert keyed["ratio"] > 0
    assert any("one concurrency key" in row["figure"] for row in report["goals"])

    claim = report["results"]["claim"]
    assert [s["queued"] for s in claim["sizes"]] == [50, 200]
    assert not claim["cut_by_budget"]
    for size in claim["sizes"]:
        assert size["claims"] == 5
        assert size["queued_after"] == size["queued"]  # topped up after every claim
        assert size["p50_ms"] > 0
        assert size["explain"]["execution_ms"] > 0
        assert size["explain"]["jobs_scans"], size["explain"]
    assert claim["ratio"] > 0
    fair = claim["fair_pickup"]
    assert (fair["samples"], fair["backlog"]) == (5, 300)
    assert 0 < fair["empty"]["p50_ms"] <= fair["empty"]["p99_ms"]
    assert 0 < fair["behind"]["p50_ms"] <= fair["behind"]["p99_ms"]
    assert any("behind another owner's 300" in row["figure"] for row in report["goals"])

    bloat = report["results"]["bloat"]
    assert [s["churned"] for s in bloat["stages"]] == [100, 300]
    assert not bloat["cut_by_budget"]
    for stage in bloat["stages"]:
        assert set(stage["tables"]) == {"jobs", "job_history", "attempts"}
        assert all(t["total_bytes"] > 0 for t in stage["tables"].values())
        assert stage["pruned"] + stage["jobs_rows"] == stage["churned"]  # all accounted for
        jobs = stage["tables"]["jobs"]
        assert {"pk_jobs", "ix_jobs_claimable", "ix_jobs_owner_seq"} <= set(jobs["indexes"])
        assert sum(jobs["indexes"].values()) == jobs["index_bytes"]
        assert len(stage["load_average"]) == 3
    assert bloat["ratio"] > 0

    # One goal row per ratio: four HTTP pairs, each search page and the bulk resume, the
    # kind API's drain and pickup, the keyed drain, the claim and the fair pickup, the hot
    # table, all three tables, two charts.
    search = report["results"]["operators"]["search"]
    assert (search["small"], search["large"]) == (2000, 6000)
    assert search["p50_ms_small"]["unresolved_kind_next_page"] > 0  # a next page at 2,000
    assert report["results"]["operators"]["bulk_resume"]["done"] == 300
    charts = report["results"]["charts"]
    assert (charts["jobs"], charts["repeats"]) == (20000, 5)
    assert charts["history_rows"] >= 20000  # the filled rows and what the jobs wrote
    searches = [n for n in search["ratios"] if n != "primary_key_read"]
    assert len(report["goals"]) == 4 + len(searches) + 1 + 2 + 1 + 2 + 2 + 2
    for row in report["goals"]:
        assert row["ratio"] > 0
        assert f"{row['ratio']:.2f}" in done.stdout
    assert str(path) in done.stdout
    assert "peers: skipped: no peer harness" in done.stdout


@pytest.mark.slow
@pytest.mark.timeout(240)
def test_a_spent_budget_cuts_the_larger_sizes_and_still_reports(
    pg_server: Server, tmp_path: Path
) -> None:
    """No time left after the baselines: the larger claim and churn sizes are skipped,
    not overrun, the JSON and the table say so, and the report still prints."""
    results_dir = tmp_path / "results"
    done = _run_suite(
        pg_server,
        tmp_path,
        results_dir,
        BENCH_SECTIONS="claim,bloat",
        BENCH_BUDGET_SECONDS="0",
    )

    (path,) = results_dir.glob("bench-*.json")
    results = json.loads(path.read_text())["results"]
    assert [s["queued"] for s in results["claim"]["sizes"]] == [50]  # the baseline only
    assert results["claim"]["cut_by_budget"]
    assert [s["churned"] for s in results["bloat"]["stages"]] == [100]
    assert results["bloat"]["cut_by_budget"]
    assert "skipped: over the time budget" in done.stderr
    assert "(asked 200: time budget)" in done.stdout
    assert "(asked 300: time budget)" in done.stdout
    assert str(path) in done.stdout
