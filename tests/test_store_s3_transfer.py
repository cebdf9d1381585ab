"""S3 transfer behaviour: multipart uploads and surviving transient errors."""

import logging
import os
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from infra.store import RetryPolicy, S3Settings, open_store
from tests.s3_server import FaultyProxy, raw_s3_client

MiB = 1024 * 1024


def test_multipart_upload_verifies(s3_root: str, moto_endpoint: str, tmp_path: Path) -> None:
    # 5 MiB is S3's minimum part size, so this is the smallest real multipart upload.
    store = open_store(s3_root, s3=S3Settings(multipart_threshold=5 * MiB, multipart_chunksize=5 * MiB))
    big = tmp_path / "shard.bin"
    big.write_bytes(os.urandom(11 * MiB))
    writer = store.begin("checkpoints/big")
    writer.put_file("shard.bin", big)
    committed = writer.commit({})

    root = urlsplit(s3_root)
    head = raw_s3_client(moto_endpoint).head_object(Bucket=root.netloc, Key=f"{root.path.strip('/')}/checkpoints/big/shard.bin")
    assert head["ETag"].strip('"').endswith("-3"), "expected a 3-part multipart upload"
    assert committed.verify() == []
    assert (committed.download(tmp_path / "out") / "shard.bin").read_bytes() == big.read_bytes()


def test_upload_survives_transient_errors(
    s3_root: str, faulty_proxy: FaultyProxy, tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    monkeypatch.setenv("POSTTRAIN_S3_ENDPOINT_URL", faulty_proxy.url)
    # botocore gets 2 attempts per request, so two faults in a row escape it and our
    # whole-operation retry loop has to take over.
    settings = S3Settings(botocore_max_attempts=2, retry=RetryPolicy(max_attempts=4, base_delay_s=0.01, seed=7))
    store = open_store(s3_root, s3=settings)
    payload = tmp_path / "weights.bin"
    payload.write_bytes(b"w" * 200_000)
    writer = store.begin("checkpoints/flaky")
    writer.put_file("weights.bin", payload)
    writer.claim()

    faulty_proxy.fail("slowdown", "drop", "slowdown", "drop", method="PUT")
    with caplog.at_level(logging.WARNING, logger="infra.store.retry"):
        writer.upload_files()
        writer.write_manifest()
        writer.write_lineage({})
        committed = writer.mark_success()

    assert faulty_proxy.injected == ["slowdown", "drop", "slowdown", "drop"]
    retries = [r.getMessage() for r in caplog.records if "transient error" in r.getMessage()]
    assert retries and all("upload" in message for message in retries)
    assert store.open("checkpoints/flaky").read_bytes("weights.bin") == payload.read_bytes()
    assert committed.verify() == []


def test_a_claim_whose_answer_was_lost_is_still_ours(
    s3_root: str, faulty_proxy: FaultyProxy, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The conditional create of the claim lands but its answer is lost; the retry's 412 must
    not make the writer wait out a lease for a claim that is its own."""
    monkeypatch.setenv("POSTTRAIN_S3_ENDPOINT_URL", faulty_proxy.url)
    settings = S3Settings(botocore_max_attempts=1, retry=RetryPolicy(max_attempts=3, base_delay_s=0.01, seed=3))
    store = open_store(s3_root, s3=settings)
    writer = store.begin("checkpoints/lost-answer", lease_s=600)
    writer.put_bytes("weights.bin", b"w" * 1000)

    faulty_proxy.fail("lost", method="PUT")
    started = time.monotonic()
    committed = writer.commit({})

    assert faulty_proxy.injected == ["lost"]
    assert time.monotonic() - started < 30
    assert committed.verify() == []
    assert store.list_committed() == ["checkpoints/lost-answer"]
