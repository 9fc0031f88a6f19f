"""Fixtures for end-to-end tests: `from tests.live_fixtures import *` in a test module."""

from __future__ import annotations

import pytest

from tests.live import LiveService, env_for

__all__ = ["live_service"]


@pytest.fixture
def live_service(storage, tmp_path, immediate_queue):
    """API + worker + simulator as processes on the test's storage; the queue is the real one."""
    immediate_queue.immediate = False
    service = LiveService(env_for(storage), tmp_path).start()
    yield service
    service.stop()
