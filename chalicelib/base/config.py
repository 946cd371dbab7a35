"""The one place that reads configuration: a frozen settings object from the environment, and
the two values a deployed stage keeps in SSM Parameter Store instead, each read at its first use
and kept for the life of the process (so at most once per cold start):

    /workset/<stage>/public-url       String, written by the stack (infra/resources.json): the
                                      API's own URL, or https://<PublicDomain>
    /workset/<stage>/console-secret   SecureString, made by the operator or infra/deploy.sh
                                      (CloudFormation cannot make SecureStrings)

The function's environment cannot carry the public URL: the API's id is known only once the API
exists, and the API refers to the function (a circular dependency in CloudFormation).
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass, field
from functools import lru_cache

import boto3
from botocore.exceptions import BotoCoreError, ClientError

from chalicelib.base import log

LOCAL_STAGES = frozenset({"local", "test"})
LOCAL_URL = "http://127.0.0.1:8000"
LOCAL_CONSOLE_SECRET = "local-console-secret"
PUBLIC_URL = "public-url"
CONSOLE_SECRET = "console-secret"
# A failed read is tried again after this long, not on every request: an absent parameter costs
# one SSM call per process per half minute, and one made later is picked up without a deploy.
PARAMETER_RETRY_SECONDS = 30.0
# An import's body may carry a whole OpenAPI document: up to what Lambda takes in a synchronous
# request (6 MB; a larger document is imported by its `url`). Every other body keeps the setting.
IMPORT_BODY_BYTES = 6 * 1024 * 1024
IMPORT_PATHS = frozenset({"/v1/imports/openapi", "/console/import"})


class MissingParameter(RuntimeError):
    """A deployed stage's parameter could not be read (absent, or SSM refused or failed)."""


class StageParameters:
    """A deployed stage's values in Parameter Store (`/workset/<stage>/<key>`): each read with one
    GetParameter (decrypted) at its first use, then kept for the life of the process."""

    def __init__(self, stage: str, region: str) -> None:
        self.path = f"/workset/{stage}"
        self._region = region
        self._values: dict[str, str] = {}
        self._failed_at: dict[str, float] = {}
        self._lock = threading.Lock()  # one read per value even when threads ask at once

    def name(self, key: str) -> str:
        """The parameter's full name."""
        return f"{self.path}/{key}"

    def get(self, key: str) -> str:
        """The parameter's value; MissingParameter when it cannot be read."""
        with self._lock:
            if key in self._values:
                return self._values[key]
            failed = self._failed_at.get(key)
            if failed is not None and time.monotonic() - failed < PARAMETER_RETRY_SECONDS:
                raise MissingParameter(f"{self.name(key)} could not be read a moment ago")
            try:
                answer = boto3.client("ssm", region_name=self._region).get_parameter(
                    Name=self.name(key), WithDecryption=True)
            except (BotoCoreError, ClientError) as error:
                self._failed_at[key] = time.monotonic()
                log.failure("stage_parameter_unreadable", error, parameter=self.name(key))
                raise MissingParameter(f"{self.name(key)} could not be read") from error
            value = str(answer["Parameter"]["Value"])
            self._values[key] = value
            return value


def body_limit(path: str) -> int:
    """The largest body a request to `path` may send."""
    return IMPORT_BODY_BYTES if path in IMPORT_PATHS else settings().max_request_bytes


@dataclass(frozen=True)
class Settings:
    """Deployment settings, read once per process."""

    stage: str
    aws_region: str
    table_prefix: str
    # WORKSET_PUBLIC_URL; unset on deployed stages, whose `public_url` is the stack's parameter
    given_public_url: str
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
    approval_hold_seconds: float  # how long a call answered inside the client waits for a person's decision
    # how long a history event is kept (its item's TTL; the template's HistoryRetentionDays)
    history_retention_days: int
    # subscriptions/listen requests one account may have held at once (0: none are held)
    max_listens_per_account: int
    # WORKSET_CONSOLE_SECRET; unset on deployed stages, whose `console_secret` is a parameter
    given_console_secret: str = field(repr=False)
    acquire_per_day: int
    registrations_per_source_hour: int
    registrations_per_hour: int
    run_retention_days: int
    search_cache_mb: float
    parameters: StageParameters = field(repr=False, compare=False)  # read at first use

    @property
    def public_url(self) -> str:
        """The URL clients reach this deployment at, without a trailing slash: WORKSET_PUBLIC_URL
        (local stages default to 127.0.0.1:8000), else the stage's `public-url` parameter."""
        if self.given_public_url or self.is_local:
            return self.given_public_url
        return self.parameters.get(PUBLIC_URL).rstrip("/")

    @property
    def mcp_url(self) -> str:
        """The MCP endpoint: what agents connect to, and the resource OAuth tokens are bound to."""
        return f"{self.public_url}/mcp"

    @property
    def console_secret(self) -> str:
        """The key console sessions are signed with: WORKSET_CONSOLE_SECRET (local stages have a
        fixed default), else the stage's `console-secret` parameter, read when the console first
        needs it; "" when there is none (the console then lets nobody in)."""
        if self.given_console_secret or self.is_local:
            return self.given_console_secret
        try:
            return self.parameters.get(CONSOLE_SECRET)
        except MissingParameter:
            return ""

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
    local = stage in LOCAL_STAGES
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or "us-east-1"
    return Settings(
        stage=stage,
        aws_region=region,
        table_prefix=os.environ.get("WORKSET_TABLE_PREFIX", f"workset-{stage}"),
        given_public_url=os.environ.get("WORKSET_PUBLIC_URL", LOCAL_URL if local else "").rstrip("/"),
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
        # how long subscriptions/listen holds a request: at most the Lambda timeout (25 s) less 5 s,
        # or Lambda ends an idle listen and API Gateway answers 502 (tests/test_deploy.py)
        listen_hold_seconds=float(os.environ.get("WORKSET_LISTEN_HOLD_SECONDS", "20")),
        approval_hold_seconds=float(os.environ.get("WORKSET_APPROVAL_HOLD_SECONDS", "20")),
        history_retention_days=int(os.environ.get("WORKSET_HISTORY_RETENTION_DAYS", "400")),
        max_listens_per_account=int(os.environ.get("WORKSET_MAX_LISTENS_PER_ACCOUNT", "10")),
        # signs console sessions; local stages have a fixed one, deployed stages read a parameter
        given_console_secret=os.environ.get("WORKSET_CONSOLE_SECRET", LOCAL_CONSOLE_SECRET if local else ""),
        # tools and versions one agent may publish with acquire per UTC day
        acquire_per_day=int(os.environ.get("WORKSET_ACQUIRE_PER_DAY", "50")),
        # OAuth clients that may register (open to anyone) per UTC hour: from one source address
        # (an IPv6 one by its /64), and from all sources together (chalicelib/oauth/limits.py)
        registrations_per_source_hour=int(os.environ.get("WORKSET_REGISTRATIONS_PER_SOURCE_HOUR", "20")),
        registrations_per_hour=int(os.environ.get("WORKSET_REGISTRATIONS_PER_HOUR", "1000")),
        # runs (input and result) are deleted by DynamoDB's TTL this many days after they start
        run_retention_days=int(os.environ.get("WORKSET_RUN_RETENTION_DAYS", "30")),
        # search indexes a warm instance keeps, least recently used out: a quarter of the function's
        # memory (the models and the runtime take about 300 MiB of 512), 256 MiB elsewhere
        search_cache_mb=float(os.environ.get("WORKSET_SEARCH_CACHE_MB",
                                             str(int(os.environ.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE", "1024")) / 4))),
        parameters=StageParameters(stage, region),
    )


def _stage() -> str:
    return settings().stage


log.stage_from(_stage)  # metrics are dimensioned by the stage as it is when each line is written
