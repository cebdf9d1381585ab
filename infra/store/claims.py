"""Who may write an artifact name: the one writer holding its newest claim.

A claim is ``<name>/_CLAIM/<generation>``, created exclusively (a hard link that fails if the
target exists on ``file://``, ``If-None-Match: *`` on S3), so exactly one writer wins each
generation. The holder rewrites its claim every few seconds; a claim whose bytes stop changing
for ``lease_s`` of the *watcher's* clock (never a comparison of clocks across machines), or whose
process is gone on this host, is stale, and the next generation takes over. Every other writer
waits for the holder: when it commits, the waiter compares digests; when it dies, the waiter
takes over.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass

from .backend import BlobBackend
from .errors import BlobNotFoundError
from .keys import CLAIMS, SUCCESS, join

log = logging.getLogger(__name__)

DEFAULT_LEASE_S = float(os.environ.get("POSTTRAIN_COMMIT_LEASE_S", "120"))
POLL_S = 0.1


@dataclass(frozen=True)
class ClaimRecord:
    writer: str
    host: str
    pid: int
    digest: str
    beat: int = 0

    def to_bytes(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_bytes(cls, data: bytes) -> ClaimRecord | None:
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError):
            return None  # torn or foreign bytes: judged by the lease like a silent holder

    def process_is_gone(self) -> bool:
        """True only when certain: the same host reports no such process."""
        if self.host != socket.gethostname():
            return False
        try:
            os.kill(self.pid, 0)
        except ProcessLookupError:
            return True
        except PermissionError:
            return False
        return False


def _claim_key(name: str, generation: int) -> str:
    return join(name, CLAIMS, f"{generation:08d}")


def _generations(backend: BlobBackend, name: str) -> list[int]:
    prefix = join(name, CLAIMS) + "/"
    return sorted(int(key[len(prefix):]) for key in backend.list_prefix(prefix) if key[len(prefix):].isdigit())


class HeldClaim:
    """The claim this writer holds; beats until released."""

    def __init__(self, backend: BlobBackend, name: str, generation: int, record: ClaimRecord, lease_s: float) -> None:
        self._backend, self._name, self.generation, self._record = backend, name, generation, record
        self._stop = threading.Event()
        self._beater = threading.Thread(target=self._beat, args=(lease_s / 6,), daemon=True,
                                        name=f"claim-{name}")
        self._beater.start()

    def _beat(self, every_s: float) -> None:
        record = self._record
        while not self._stop.wait(every_s):
            record = ClaimRecord(**{**asdict(record), "beat": record.beat + 1})
            try:
                self._backend.put_bytes(_claim_key(self._name, self.generation), record.to_bytes())
            except Exception as exc:  # a missed beat only shortens the lease others see
                log.warning("could not renew the claim on %s: %s", self._name, exc)

    def still_held(self) -> bool:
        """Nobody has taken over: our generation is the newest and still ours."""
        generations = _generations(self._backend, self._name)
        if not generations or generations[-1] != self.generation:
            return False
        try:
            current = ClaimRecord.from_bytes(self._backend.get_bytes(_claim_key(self._name, self.generation)))
        except Exception:
            return False
        return current is not None and current.writer == self._record.writer

    def release(self) -> None:
        """Stop beating and remove every claim of the name, so the next writer need not wait a lease."""
        self._stop.set()
        self._beater.join()
        for generation in _generations(self._backend, self._name):
            self._backend.delete(_claim_key(self._name, generation))


class _StaleWatch:
    """Judges the newest claim stale when its bytes stop changing for a lease (our clock)."""

    def __init__(self, lease_s: float) -> None:
        self._lease_s = lease_s
        self._seen: tuple[int, bytes] | None = None
        self._since = 0.0

    def is_stale(self, generation: int, data: bytes | None) -> bool:
        if data is None:
            return True  # deleted between listing and reading: its holder released it
        record = ClaimRecord.from_bytes(data)
        if record is not None and record.process_is_gone():
            return True
        if self._seen != (generation, data):
            self._seen, self._since = (generation, data), time.monotonic()
            return False
        return time.monotonic() - self._since > self._lease_s


def acquire(backend: BlobBackend, name: str, digest: str, lease_s: float = DEFAULT_LEASE_S) -> HeldClaim | None:
    """Hold the name's claim, waiting while a live writer holds it; None once the name is committed
    (by anyone), which the caller then reads."""
    record = ClaimRecord(writer=uuid.uuid4().hex, host=socket.gethostname(), pid=os.getpid(), digest=digest)
    watch = _StaleWatch(lease_s)
    announced = False
    while True:
        if backend.exists(join(name, SUCCESS)):
            return None
        generations = _generations(backend, name)
        newest = generations[-1] if generations else 0
        if newest == 0 or watch.is_stale(newest, _read_or_none(backend, _claim_key(name, newest))):
            if backend.create_exclusive(_claim_key(name, newest + 1), record.to_bytes()):
                return HeldClaim(backend, name, newest + 1, record, lease_s)
            continue  # another writer took this generation; watch theirs
        if not announced:
            log.info("%s/%s is being committed by another writer; waiting for it", backend.root_uri, name)
            announced = True
        time.sleep(POLL_S)


def _read_or_none(backend: BlobBackend, key: str) -> bytes | None:
    try:
        return backend.get_bytes(key)
    except BlobNotFoundError:
        return None
