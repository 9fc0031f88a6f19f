"""bench/auth_timing: how long a key check takes for an unknown key id against a known id with a
wrong secret, interleaved in one run on a fresh SQLite database.

    python -m bench.auth_timing [--rounds 20000]

Prints both medians and their ratio (target: between 0.9 and 1.1: the answer's timing does not
tell which key ids exist).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20_000)
    args = parser.parse_args()

    from cryptography.fernet import Fernet

    from config import load_settings, use_settings
    from models.setup import init_db
    from models.store.db import connection, upgrade
    from models.tenancy.keys import authenticate, create_key
    from models.tenancy.tenants import create_tenant

    with tempfile.TemporaryDirectory() as data_dir:
        key_env = {"SVC_DATA_DIR": data_dir, "SVC_SECRET_KEY": Fernet.generate_key().decode()}
        settings = use_settings(load_settings(key_env))
        init_db(settings)
        upgrade()
        with connection():
            key, _key_string = create_key(create_tenant("Timing Co"), ["all"])
            known = f"svc_live_{key.public_id}.{'x' * 43}"
            unknown = f"svc_live_key_{'y' * 24}.{'x' * 43}"
            samples: dict[str, list[float]] = {"known id": [], "unknown id": []}
            for _ in range(args.rounds):
                for name, token in (("known id", known), ("unknown id", unknown)):
                    started = time.perf_counter()
                    assert authenticate(token) is None
                    samples[name].append(time.perf_counter() - started)
    medians = {name: statistics.median(values) * 1e6 for name, values in samples.items()}
    for name, value in medians.items():
        print(f"{name:>10}: median {value:.2f} µs over {args.rounds} checks")
    print(f"ratio unknown/known: {medians['unknown id'] / medians['known id']:.3f} (target 0.9 to 1.1)")


if __name__ == "__main__":
    main()
