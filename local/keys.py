"""The embedded emulator's KMS keys on disk (the tables are local/journal.py's)."""

from __future__ import annotations

import base64
import copy
import json
from pathlib import Path

from local.environment import write_private


class KmsKeys:
    """The embedded emulator's KMS keys survive a restart too: their material is saved beside the
    tables' snapshot and put back at start, so secrets encrypted before (connections, webhook
    secrets) still decrypt. Only for the embedded moto server, which runs in this process."""

    def __init__(self, path: Path, region: str) -> None:
        from moto.core import DEFAULT_ACCOUNT_ID
        from moto.kms.models import kms_backends

        self.path = path
        self.backend = kms_backends[DEFAULT_ACCOUNT_ID][region]

    def restore(self) -> None:
        """Give every saved key id its saved material (after the current key was created)."""
        if not self.path.exists() or not self.backend.keys:
            return
        template = next(iter(self.backend.keys.values()))
        for key_id, material in json.loads(self.path.read_text()).items():
            if key_id not in self.backend.keys:
                key = copy.copy(template)
                key.id, key.key_material = key_id, base64.b64decode(material)
                self.backend.keys[key_id] = key

    def save(self) -> None:
        """Write every key's material (the local stack's own, never a real AWS secret)."""
        keys = {key_id: base64.b64encode(key.key_material).decode() for key_id, key in self.backend.keys.items()}
        write_private(self.path, json.dumps(keys))
