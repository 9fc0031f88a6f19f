"""Reading the Prometheus text format in tests, with prometheus_client's own parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Samples = dict[tuple[str, frozenset], float]


def parse(text: str) -> Samples:
    """Every sample: (name, its labels) -> value."""
    return {(sample.name, frozenset(sample.labels.items())): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def total(samples: Samples, name: str, **labels) -> float:
    """The sum of `name`'s samples whose labels include `labels`."""
    wanted = set(labels.items())
    return sum(value for (sample, sample_labels), value in samples.items()
               if sample == name and wanted <= sample_labels)
