"""Reading a Prometheus text exposition in tests (prometheus-client's own parser)."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample as ``(name, labels) -> value``; parsing fails on a malformed text
    (a family given twice, a bad line), which is part of what the tests check."""
    found: dict[tuple[str, frozenset[tuple[str, str]]], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, f"sample given twice: {key}"
            found[key] = sample.value
    return found


def value(text: str, name: str, **labels: str) -> float | None:
    """The one sample named ``name`` with exactly ``labels``; None when absent."""
    return samples(text).get((name, frozenset(labels.items())))


def total(text: str, name: str, **labels: str) -> float:
    """The sum of every sample named ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    return sum(v for (n, ls), v in samples(text).items() if n == name and wanted <= ls)
