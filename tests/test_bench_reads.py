"""`python -m bench.api --all` times every read of the API: a new GET route joins its list."""

from __future__ import annotations

from api.app import area_modules
from bench.reads import LEFT_OUT, READS


def test_the_read_bench_covers_every_get_route_of_the_api():
    routes = {path for module in area_modules() for path, resource in getattr(module, "ROUTES", [])
              if hasattr(resource, "on_get")}
    benched = {read.partition("?")[0] for read in READS}
    assert routes - set(LEFT_OUT) == benched
    assert not benched & set(LEFT_OUT)


def test_only_keeps_the_reads_whose_path_holds_a_given_text():
    from bench.reads import selected

    assert selected(None) == READS
    assert selected(["/accounts", "/credits/ledger"]) == tuple(
        read for read in READS if read.startswith("/accounts") or read == "/credits/ledger")


def test_only_with_a_text_no_read_holds_stops_with_a_message():
    import pytest

    from bench.reads import selected

    with pytest.raises(SystemExit, match="no read"):
        selected(["/nowhere"])
