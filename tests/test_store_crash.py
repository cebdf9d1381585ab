"""A writer killed mid-commit leaves nothing visible, and a retry completes the commit."""

import signal
import subprocess
import sys
import time

import pytest

from infra.store import ArtifactNotCommittedError, open_store
from infra.store.claims import ClaimRecord

# Runs in a separate interpreter so SIGKILL is a real, uncatchable crash: no finally
# blocks, no atexit, exactly what an OOM-killed trainer looks like to the store.
CRASHING_WRITER = """
import os, signal, sys
from infra.store import open_store
writer = open_store(sys.argv[1]).begin(sys.argv[2])
writer.put_bytes("weights.bin", b"first attempt" * 1000)
writer.put_bytes("stale.bin", b"only the crashed attempt wrote this")
writer.claim()
writer.upload_files()
writer.write_manifest()
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_crash_before_success_then_retry(store_root: str) -> None:
    name = "checkpoints/sft/crashy"
    child = subprocess.run([sys.executable, "-c", CRASHING_WRITER, store_root, name], capture_output=True, timeout=120)
    assert child.returncode == -signal.SIGKILL, child.stderr.decode(errors="replace")

    store = open_store(store_root)
    assert f"{name}/manifest.json" in store.backend.list_prefix(name + "/"), "child should have crashed after the manifest"
    with pytest.raises(ArtifactNotCommittedError, match=f"{store.root_uri}/{name}"):
        store.open(name)
    assert store.list_committed() == []

    retry = store.begin(name)
    retry.put_bytes("weights.bin", b"second attempt" * 1000)
    retry.commit({"attempt": 2})

    reopened = store.open(name)
    assert reopened.read_bytes("weights.bin") == b"second attempt" * 1000
    assert reopened.verify() == []  # the crashed attempt's stale.bin is gone
    assert store.list_committed() == [name]


def test_a_silent_claim_from_another_machine_expires_after_its_lease(store_root: str) -> None:
    """A writer on another host that stopped renewing its claim (crashed, partitioned) holds the
    name only for one lease, measured by the waiting writer's own clock."""
    store = open_store(store_root)
    name = "checkpoints/sft/orphaned"
    silent = ClaimRecord(writer="gone", host="another-node", pid=1, digest="0" * 64)
    assert store.backend.create_exclusive(f"{name}/_CLAIM/00000001", silent.to_bytes())

    writer = store.begin(name, lease_s=1.0)
    writer.put_bytes("weights.bin", b"taken over")
    started = time.monotonic()
    committed = writer.commit({"attempt": "after the lease"})

    assert 1.0 <= time.monotonic() - started < 30
    assert committed.verify() == []
    assert [key for key in store.backend.list_prefix(name + "/") if "_CLAIM" in key] == []
