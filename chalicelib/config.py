"""The one place that reads the environment: a frozen settings object."""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache

LOCAL_STAGES = frozenset({"local", "test"})


@dataclass(frozen=True)
class Settings:
    """Deployment settings, read once per process."""

    stage: str
    aws_region: str
    table_prefix: str
    public_url: str
    vendor_timeout_seconds: float
    vendor_max_response_bytes: int
    allow_private_network: bool
    allowed_origins: tuple[str, ...]
    max_request_bytes: int
    kms_key_id: str
    approval_ttl_seconds: int
    lease_margin_seconds: int
    webhook_timeout_seconds: float
    webhook_retry_base_seconds: float
    listen_hold_seconds: float
    console_secret: str
    acquire_per_day: int

    @property
    def sweep_queue(self) -> str:
        """The queue the sweep hands batches of agents to when there are many."""
        return f"{self.table_prefix}-sweep"

    @property
    def webhook_queue(self) -> str:
        """The queue of webhook deliveries."""
        return f"{self.table_prefix}-webhooks"

    @property
    def is_local(self) -> bool:
        """True on the local stack and in tests, where operator overrides are allowed."""
        return self.stage in LOCAL_STAGES


def _flag(name: str, default: bool) -> bool:
    value = os.environ.get(name)
    if value is None:
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


@lru_cache(maxsize=1)
def settings() -> Settings:
    """The settings of this process (environment variables, with defaults)."""
    stage = os.environ.get("WORKSET_STAGE", "dev")
    return Settings(
        stage=stage,
        aws_region=os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1",
        table_prefix=os.environ.get("WORKSET_TABLE_PREFIX", f"workset-{stage}"),
        public_url=os.environ.get("WORKSET_PUBLIC_URL", "http://127.0.0.1:8000").rstrip("/"),
        vendor_timeout_seconds=float(os.environ.get("WORKSET_VENDOR_TIMEOUT_SECONDS", "10")),
        vendor_max_response_bytes=int(os.environ.get("WORKSET_VENDOR_MAX_RESPONSE_BYTES", str(1024 * 1024))),
        allow_private_network=_flag("WORKSET_ALLOW_PRIVATE_NETWORK", stage in LOCAL_STAGES),
        allowed_origins=tuple(
            origin.strip() for origin in os.environ.get("WORKSET_ALLOWED_ORIGINS", "").split(",") if origin.strip()
        ),
        max_request_bytes=int(os.environ.get("WORKSET_MAX_REQUEST_BYTES", str(256 * 1024))),
        kms_key_id=os.environ.get("WORKSET_KMS_KEY_ID", f"alias/workset-{stage}"),
        approval_ttl_seconds=int(os.environ.get("WORKSET_APPROVAL_TTL_SECONDS", str(24 * 3600))),
        lease_margin_seconds=int(os.environ.get("WORKSET_LEASE_MARGIN_SECONDS", "30")),
        webhook_timeout_seconds=float(os.environ.get("WORKSET_WEBHOOK_TIMEOUT_SECONDS", "5")),
        webhook_retry_base_seconds=float(os.environ.get("WORKSET_WEBHOOK_RETRY_BASE_SECONDS", "10")),
        listen_hold_seconds=float(os.environ.get("WORKSET_LISTEN_HOLD_SECONDS", "25")),
        # signs console sessions; local stages have a fixed one, deployed stages must set it
        console_secret=os.environ.get("WORKSET_CONSOLE_SECRET", "local-console-secret" if stage in LOCAL_STAGES else ""),
        # tools and versions one agent may publish with acquire per UTC day
        acquire_per_day=int(os.environ.get("WORKSET_ACQUIRE_PER_DAY", "50")),
    )
