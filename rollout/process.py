"""Start a rollout engine as its own process on this machine and stop it again."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from infra.ports import free_port
from rollout.client import EngineClient, EngineUnavailableError


class EngineProcess:
    """`with EngineProcess(uri, log_path) as client:` serves `uri` until the block ends."""

    def __init__(self, checkpoint: str, log_path: Path, *, seed: int = 0, host: str = "127.0.0.1",
                 startup_timeout_s: float = 120.0):
        self.checkpoint, self.log_path, self.seed, self.host = checkpoint, Path(log_path), seed, host
        self.startup_timeout_s = startup_timeout_s
        self.process: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> EngineClient:
        port = free_port(self.host)
        self.url = f"http://{self.host}:{port}"
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "rollout.server", "--checkpoint", self.checkpoint, "--host", self.host,
                 "--port", str(port), "--seed", str(self.seed)],
                stdout=log, stderr=subprocess.STDOUT,
            )
        client = EngineClient(self.url)
        try:
            client.wait_until_healthy(self.startup_timeout_s, is_alive=lambda: self.process.poll() is None)
        except EngineUnavailableError as error:
            self.stop()
            raise EngineUnavailableError(f"{error}; engine log: {self.log_path}") from error
        return client

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> EngineClient:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
