"""Secrets at rest: KMS encryption with the account and connection as encryption context, so a
ciphertext copied to another connection or account does not decrypt. A `purpose` (a connection's
tokens beside its secret) goes into the context's connection id, so one of a connection's
ciphertexts does not decrypt as another either (the IAM policy admits exactly these two keys)."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import boto3

from chalicelib.base.config import settings


@lru_cache(maxsize=1)
def _kms() -> Any:
    return boto3.client("kms", region_name=settings().aws_region)


def encrypt(secret: str, *, account_id: str, connection_id: str, purpose: str = "") -> bytes:
    """Ciphertext of `secret`, bound to its account, connection and purpose."""
    answer = _kms().encrypt(
        KeyId=settings().kms_key_id,
        Plaintext=secret.encode(),
        EncryptionContext={"account_id": account_id, "connection_id": _context(connection_id, purpose)},
    )
    return answer["CiphertextBlob"]


def decrypt(ciphertext: bytes, *, account_id: str, connection_id: str, purpose: str = "") -> str:
    """The secret behind a ciphertext made by `encrypt` for the same account, connection and purpose."""
    answer = _kms().decrypt(
        CiphertextBlob=ciphertext,
        EncryptionContext={"account_id": account_id, "connection_id": _context(connection_id, purpose)},
    )
    return answer["Plaintext"].decode()


def _context(connection_id: str, purpose: str) -> str:
    return f"{connection_id}#{purpose}" if purpose else connection_id


def ensure_key() -> str:
    """Create the key and its alias where they do not exist (local stack and tests only)."""
    alias = settings().kms_key_id
    client = _kms()
    aliases = {entry["AliasName"] for entry in client.list_aliases()["Aliases"]}
    if alias not in aliases:
        key_id = client.create_key(Description="Workset connection secrets")["KeyMetadata"]["KeyId"]
        client.create_alias(AliasName=alias, TargetKeyId=key_id)
    return alias
