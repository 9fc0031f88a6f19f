"""A new master key where the old one may have been given away, and every secret at rest
re-encrypted under it.

Before this release the verify token and the simulator's app secret, when left unset, were cut
out of the master key, and the simulator showed its secret to anyone: an installation running on
those defaults may have handed its key out. The values are now derived with HKDF, which does not
make an old key safe again. So where the key is the one the service generated into its data dir,
this migration replaces it: a new key, every stored secret re-encrypted under it, the old key
gone. A key given in SVC_SECRET_KEY belongs to its operator, who is told to replace it (the log).

It runs on installations that hold data (a fresh one has nothing under an old key) and changes
nothing when both values were set explicitly. The new key is written beside the old one
(`secret.key.next`) before any secret is re-encrypted, and replaces it once they all are: a run
that stops part way runs again at the next `svcctl db upgrade`, reading each secret with
whichever of the two keys opens it. The tables and columns are named here as they were when it
was written.
"""

import dataclasses
import logging
import os

from cryptography.fernet import Fernet, InvalidToken, MultiFernet

from config import get_settings, use_settings
from config.settings import DERIVED, derived_default, private_data_file

log = logging.getLogger(__name__)

# Its own transaction, committed before the new key replaces the old one on disk.
atomic = False
# Every column that holds a secret encrypted with the master key.
ENCRYPTED = (("messaging_account", "access_token"), ("webhook_endpoint", "secret_ciphertext"),
             ("idempotency_record", "body"))


def up(migrator, db):
    settings = get_settings()
    if db.execute_sql('SELECT 1 FROM "tenant" LIMIT 1').fetchone() is None:
        return  # a fresh installation: no secret was ever stored under a sliced key
    defaults = [name for name in DERIVED if getattr(settings, name) == derived_default(settings.secret_key, name)]
    if not defaults:
        return
    key_file = settings.data_dir / "secret.key"
    if not key_file.exists() or key_file.read_text().strip() != settings.secret_key:
        log.warning("%s came from SVC_SECRET_KEY in an earlier release in a way that could reveal the key: "
                    "replace SVC_SECRET_KEY (re-encrypting the stored secrets) and set SVC_VERIFY_TOKEN and "
                    "SVC_APP_SECRET explicitly", " and ".join(defaults))
        return

    next_file = key_file.with_name("secret.key.next")
    if not next_file.exists():
        written = private_data_file(key_file.with_name("secret.key.tmp"))
        written.write_text(Fernet.generate_key().decode())
        os.replace(written, next_file)  # whole or absent
    old, new = settings.secret_key, next_file.read_text().strip()
    readers = MultiFernet([Fernet(new.encode()), Fernet(old.encode())])
    writer = Fernet(new.encode())
    param = db.param
    with db.atomic():
        for table, column in ENCRYPTED:
            rows = db.execute_sql(f'SELECT "id", "{column}" FROM "{table}" WHERE "{column}" IS NOT NULL').fetchall()
            for row_id, value in rows:
                try:
                    plain = readers.decrypt(value.encode())
                except InvalidToken:
                    continue  # not a secret: an idempotent reply is stored encrypted only when it holds one
                db.execute_sql(f'UPDATE "{table}" SET "{column}" = {param} WHERE "id" = {param}',
                               (writer.encrypt(plain).decode(), row_id))
    os.replace(next_file, key_file)

    # This process goes on with the new key (`svcctl up` starts the service next).
    derived = {name: derived_default(new, name) for name in defaults}
    use_settings(dataclasses.replace(settings, secret_key=new, secret_keys=(new,), **derived))
    log.warning("the master key in %s was replaced and every stored secret re-encrypted under the new one; "
                "the default verify token changed with it: set SVC_VERIFY_TOKEN and SVC_APP_SECRET explicitly",
                key_file)
