"""Reading the Prometheus text format in tests, with prometheus_client's own parser; the in-process
app served as gunicorn serves it on loopback. `from tests.operations_fixtures import *` brings the
fixture; helpers are imported by name."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from config import metrics_access

__all__ = ["served_on_loopback"]

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


@pytest.fixture
def served_on_loopback():
    """This process's app listening on loopback, as a gunicorn worker bound to 127.0.0.1 records
    it (api/gunicorn_settings.py): its /metrics is open to loopback clients without a token."""
    metrics_access.listening_on([("127.0.0.1", 8080)])
    yield
    metrics_access.listening_on([])
