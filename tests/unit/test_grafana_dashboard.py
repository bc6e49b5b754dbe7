"""The Grafana dashboard (docs/grafana/atlas-jobs.json) parses, every panel queries the
dashboard's Prometheus data source, and every metric family it queries is one the
service exposes: the families of atlas_jobs._app.metrics' registry and of an API
process's registry (its queue gauges included), as ``/metrics`` renders them."""

from __future__ import annotations

import json
import re
from pathlib import Path

from prometheus_client.exposition import generate_latest

from atlas_jobs._app import metrics
from atlas_jobs._app.api.metrics import ApiMetrics

DASHBOARD = Path(__file__).resolve().parents[2] / "docs" / "grafana" / "atlas-jobs.json"
_FAMILY = re.compile(r"\batlas_[a-z0-9_]+")


def exposed() -> set[str]:
    """The family names ``/metrics`` declares (``# TYPE name kind``), with their sample
    names (a counter's ``_total``, a histogram's ``_bucket``/``_count``/``_sum``)."""
    text = (generate_latest(metrics.REGISTRY) + generate_latest(ApiMetrics().registry)).decode()
    names: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            names.add(name)
            if kind == "counter":
                names.add(f"{name}_total")
            if kind == "histogram":
                names.update(f"{name}{suffix}" for suffix in ("_bucket", "_count", "_sum"))
    return names


def queried(dashboard: dict[str, object]) -> dict[str, set[str]]:
    """Each panel's title -> the metric names its queries name."""
    found: dict[str, set[str]] = {}
    for panel in dashboard["panels"]:  # type: ignore[attr-defined]
        for target in panel.get("targets", []):
            found.setdefault(panel["title"], set()).update(_FAMILY.findall(target["expr"]))
    return found


def test_the_dashboard_parses_and_queries_only_metrics_the_service_exposes() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "atlas-jobs"
    by_panel = queried(dashboard)
    assert len(by_panel) >= 15
    names = exposed()
    missing = {title: sorted(n for n in used if n not in names) for title, used in by_panel.items()}
    assert {title: gone for title, gone in missing.items() if gone} == {}
    # The scaling signal and the paused kinds are on it.
    used = set().union(*by_panel.values())
    assert {"atlas_queue_oldest_claimable_age_seconds", "atlas_kind_paused"} <= used
    for panel in dashboard["panels"]:
        if panel["type"] != "row":
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}


def test_a_misspelt_metric_would_be_caught() -> None:
    names = exposed()
    assert "atlas_jobs_created_total" in names
    assert "atlas_job_duration_seconds_bucket" in names
    assert "atlas_job_duration_seconds_buckets" not in names
