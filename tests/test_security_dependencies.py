"""The dependency audit fails closed: when no vulnerability service answers, `scripts/audit`
exits non-zero instead of reporting "no known vulnerabilities"."""

from __future__ import annotations

import os
import subprocess

from tests.live import ROOT, free_port


def test_the_audit_fails_when_its_vulnerability_service_cannot_be_reached():
    closed = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env = {**os.environ, "HTTPS_PROXY": closed, "HTTP_PROXY": closed, "https_proxy": closed, "http_proxy": closed}
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    for service in ("pypi", "osv"):
        run = subprocess.run([str(ROOT / "scripts" / "audit"), "--vulnerability-service", service], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=300)
        output = run.stdout + run.stderr
        assert run.returncode != 0, output
        assert "No known vulnerabilities found" not in output
        assert "Unable to connect to proxy" in output, output[-3000:]  # it failed asking, not before


def test_the_locks_pin_every_package_with_hashes():
    for lock in ("runtime", "test"):
        entries = (ROOT / "requirements" / f"{lock}.txt").read_text().split("\n")
        pinned = [line for line in entries if line and not line.startswith((" ", "#"))]
        assert pinned, lock
        for line in pinned:
            name, _, rest = line.partition("==")
            assert name and rest.split()[0], line
        assert "--hash=sha256:" in "\n".join(entries)
