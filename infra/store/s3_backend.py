"""Blob backend over ``s3://bucket/prefix``.

Files go through boto3's managed transfer (multipart above the threshold, parallel
parts) with S3-side SHA256 checksums on every part; our full-file sha256 rides along
as object metadata and is checked with a HEAD after the upload.
"""

import base64
from pathlib import Path

from botocore.client import BaseClient
from botocore.exceptions import ClientError

from .errors import BlobNotFoundError, IntegrityError
from .hashing import sha256_bytes, sha256_file
from .keys import join
from .retry import Retrier
from .s3_client import S3Settings
from .s3_errors import is_not_found, is_precondition_failed, is_transient

SHA256_METADATA = "sha256"


def _b64(hex_digest: str) -> str:
    return base64.b64encode(bytes.fromhex(hex_digest)).decode("ascii")


class S3Backend:
    def __init__(self, client: BaseClient, bucket: str, prefix: str, settings: S3Settings) -> None:
        self._client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._transfer = settings.transfer_config()
        self._retrier = Retrier(settings.retry, is_transient)

    @property
    def root_uri(self) -> str:
        return f"s3://{join(self.bucket, self.prefix)}"

    def _key(self, key: str) -> str:
        return join(self.prefix, key)

    def _not_found(self, key: str) -> BlobNotFoundError:
        return BlobNotFoundError(f"{self.root_uri}/{key} does not exist")

    def put_file(self, key: str, local_path: Path, sha256: str, size: int) -> None:
        def upload() -> None:
            self._client.upload_file(
                str(local_path), self.bucket, self._key(key),
                ExtraArgs={"ChecksumAlgorithm": "SHA256", "Metadata": {SHA256_METADATA: sha256}},
                Config=self._transfer,
            )
            self._check_uploaded(key, sha256, size)

        self._retrier.call(f"upload {self.root_uri}/{key}", upload)

    def _check_uploaded(self, key: str, sha256: str, size: int) -> None:
        head = self._client.head_object(Bucket=self.bucket, Key=self._key(key), ChecksumMode="ENABLED")
        problems = []
        if head["ContentLength"] != size:
            problems.append(f"size {head['ContentLength']} != {size}")
        if head.get("Metadata", {}).get(SHA256_METADATA) != sha256:
            problems.append(f"sha256 metadata {head.get('Metadata', {}).get(SHA256_METADATA)} != {sha256}")
        # Below the threshold the transfer is one PutObject whose SHA256 S3 computed over
        # the bytes it received, so it must equal our hash of the local file (it differs
        # if the file changed after hashing). Multipart checksums are per-part composites.
        server_sha = head.get("ChecksumSHA256")
        if size < self._transfer.multipart_threshold and server_sha and server_sha != _b64(sha256):
            problems.append(f"S3 checksum {server_sha} != {_b64(sha256)}")
        if problems:
            raise IntegrityError(f"upload of {self.root_uri}/{key} does not verify: {'; '.join(problems)}")

    def put_bytes(self, key: str, data: bytes) -> None:
        # Sending our own digest makes S3 reject the PUT if the bytes were altered in flight.
        self._retrier.call(
            f"put {self.root_uri}/{key}",
            lambda: self._client.put_object(
                Bucket=self.bucket, Key=self._key(key), Body=data,
                ChecksumSHA256=_b64(sha256_bytes(data)),
            ),
        )

    def create_exclusive(self, key: str, data: bytes) -> bool:
        """A conditional PUT (``If-None-Match: *``): S3 answers 412 when the key exists, and 409
        while a concurrent conditional write of the key is in flight (retried as transient).
        Callers' data is unique to the writer, so a 412 over our own bytes means an earlier
        attempt landed and only its answer was lost: the key is ours."""
        def put() -> bool:
            try:
                self._client.put_object(
                    Bucket=self.bucket, Key=self._key(key), Body=data,
                    ChecksumSHA256=_b64(sha256_bytes(data)), IfNoneMatch="*",
                )
            except ClientError as exc:
                if is_precondition_failed(exc):
                    return self.get_bytes(key) == data
                raise
            return True

        return self._retrier.call(f"create {self.root_uri}/{key}", put)

    def get_bytes(self, key: str) -> bytes:
        def get() -> bytes:
            try:
                return self._client.get_object(Bucket=self.bucket, Key=self._key(key))["Body"].read()
            except ClientError as exc:
                if is_not_found(exc):
                    raise self._not_found(key) from None
                raise

        return self._retrier.call(f"get {self.root_uri}/{key}", get)

    def download_file(self, key: str, local_path: Path) -> str:
        def download() -> str:
            try:
                self._client.download_file(self.bucket, self._key(key), str(local_path), Config=self._transfer)
            except ClientError as exc:
                if is_not_found(exc):
                    raise self._not_found(key) from None
                raise
            # Parallel ranged GETs land out of order, so hash the finished file.
            return sha256_file(local_path)

        return self._retrier.call(f"download {self.root_uri}/{key}", download)

    def exists(self, key: str) -> bool:
        def head() -> bool:
            try:
                self._client.head_object(Bucket=self.bucket, Key=self._key(key))
                return True
            except ClientError as exc:
                if is_not_found(exc):
                    return False
                raise

        return self._retrier.call(f"head {self.root_uri}/{key}", head)

    def list_prefix(self, prefix: str) -> list[str]:
        # The root prefix is a directory, the caller's prefix a plain string prefix.
        full = f"{self.prefix}/{prefix}" if self.prefix else prefix
        strip = len(self.prefix) + 1 if self.prefix else 0

        def list_all() -> list[str]:
            pages = self._client.get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=full)
            return sorted(obj["Key"][strip:] for page in pages for obj in page.get("Contents", []))

        return self._retrier.call(f"list {self.root_uri}/{prefix}", list_all)

    def delete(self, key: str) -> None:
        self._retrier.call(
            f"delete {self.root_uri}/{key}",
            lambda: self._client.delete_object(Bucket=self.bucket, Key=self._key(key)),
        )
