"""S3 client construction: endpoint from the environment, retries on, instance metadata off."""

import os
from dataclasses import dataclass, field

import boto3.session
import botocore.session
from boto3.s3.transfer import TransferConfig
from botocore.client import BaseClient
from botocore.config import Config

from .retry import RetryPolicy

MiB = 1024 * 1024


@dataclass(frozen=True)
class S3Settings:
    multipart_threshold: int = 64 * MiB
    multipart_chunksize: int = 16 * MiB
    max_concurrency: int = 8
    # Per-request retries inside botocore; `retry` wraps whole operations on top.
    botocore_max_attempts: int = 5
    retry: RetryPolicy = field(default_factory=RetryPolicy)

    def transfer_config(self) -> TransferConfig:
        return TransferConfig(
            multipart_threshold=self.multipart_threshold,
            multipart_chunksize=self.multipart_chunksize,
            max_concurrency=self.max_concurrency,
        )


def endpoint_url() -> str | None:
    """POSTTRAIN_S3_ENDPOINT_URL wins, then AWS_ENDPOINT_URL (MinIO, Ceph, moto, ...)."""
    return os.environ.get("POSTTRAIN_S3_ENDPOINT_URL") or os.environ.get("AWS_ENDPOINT_URL") or None


def make_s3_client(settings: S3Settings) -> BaseClient:
    session = botocore.session.get_session()
    # Off-EC2 (laptops, on-prem GPU nodes) an IMDS probe stalls every cold start for
    # seconds before failing; credentials must come from env, config files, SSO or
    # web identity. This is AWS_EC2_METADATA_DISABLED=true without mutating os.environ.
    session.get_component("credential_provider").remove("iam-role")
    config = Config(
        retries={"mode": "standard", "max_attempts": settings.botocore_max_attempts},
        # "auto" defaults mode would query IMDS for the region; pin a non-probing mode.
        defaults_mode="standard",
        max_pool_connections=max(10, settings.max_concurrency * 2),
    )
    # A boto3 session on top, because only boto3 injects the managed upload_file/download_file.
    return boto3.session.Session(botocore_session=session).client("s3", endpoint_url=endpoint_url(), config=config)
