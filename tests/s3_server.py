"""A real S3 endpoint for tests: moto_server in a subprocess, plus a fault-injecting proxy.

No mocks: the store talks HTTP to these exactly as it would to S3.
"""

import http.client
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import boto3
import pytest

from infra.ports import free_port

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "expect", "proxy-connection"}


@pytest.fixture(scope="session")
def moto_endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """URL of a moto_server started once per session from this interpreter's venv."""
    port = free_port()
    # A file, not a pipe: moto logs every request to stderr and nobody drains a pipe.
    log_path = tmp_path_factory.mktemp("moto") / "moto_server.log"
    log = open(log_path, "wb")
    server = subprocess.Popen(
        [str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        if server.poll() is not None:
            pytest.fail(f"moto_server exited early: {log_path.read_text(errors='replace')}")
        try:
            urllib.request.urlopen(url + "/", timeout=1).close()
            break
        except urllib.error.HTTPError:
            break  # any HTTP answer means it is serving
        except OSError:
            if time.monotonic() > deadline:
                server.kill()
                pytest.fail("moto_server did not answer within 30s")
            time.sleep(0.05)
    yield url
    server.terminate()
    try:
        server.wait(timeout=10)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
    log.close()


@pytest.fixture
def s3_root(moto_endpoint: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """``s3://<fresh bucket>/store`` with the environment pointing at moto.

    AWS config files point at nothing so a developer's ~/.aws never leaks into a test.
    """
    monkeypatch.setenv("POSTTRAIN_S3_ENDPOINT_URL", moto_endpoint)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "aws-config-absent"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "aws-credentials-absent"))
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    bucket = f"test-{uuid.uuid4().hex[:16]}"
    raw_s3_client(moto_endpoint).create_bucket(Bucket=bucket)
    return f"s3://{bucket}/store"


def raw_s3_client(endpoint: str):
    """A plain client for arranging test state behind the store's back."""
    return boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1",
        aws_access_key_id="testing", aws_secret_access_key="testing",
    )


class FaultyProxy:
    """Forwards HTTP to an upstream, answering the next matching requests with faults.

    Armed faults are consumed in order, one per request with the armed HTTP method:
    "slowdown" answers 503 SlowDown, "drop" reads the request and closes the
    connection without a response, "lost" forwards the request (it takes effect) and then
    closes the connection without a response.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = urlsplit(upstream).netloc
        self._faults: list[str] = []
        self._fault_method = ""
        self.injected: list[str] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> "FaultyProxy":
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def fail(self, *faults: str, method: str) -> None:
        with self._lock:
            self._faults = list(faults)
            self._fault_method = method

    def _next_fault(self, method: str) -> str | None:
        with self._lock:
            if not self._faults or method != self._fault_method:
                return None
            fault = self._faults.pop(0)
            self.injected.append(fault)
            return fault

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            # HTTP/1.1 keeps botocore's pooled connections alive, as against real S3.
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _read_body(self) -> bytes:
                if "chunked" in self.headers.get("Transfer-Encoding", ""):
                    return self._read_chunked()
                return self.rfile.read(int(self.headers.get("Content-Length", 0)))

            def _read_chunked(self) -> bytes:
                # Re-framed as-is: botocore streams aws-chunked bodies with checksum trailers.
                raw = b""
                while True:
                    size_line = self.rfile.readline()
                    raw += size_line
                    size = int(size_line.split(b";")[0], 16)
                    if size == 0:
                        break
                    raw += self.rfile.read(size + 2)
                while (trailer := self.rfile.readline()) not in (b"\r\n", b""):
                    raw += trailer
                return raw + b"\r\n"

            def _proxy(self) -> None:
                body = self._read_body()
                fault = proxy._next_fault(self.command)
                if fault == "drop":
                    self.close_connection = True
                    return
                if fault == "slowdown":
                    payload = b"<Error><Code>SlowDown</Code><Message>Please reduce your request rate.</Message></Error>"
                    self.send_response(503)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload if self.command != "HEAD" else b"")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("expect", "proxy-connection")}
                upstream = http.client.HTTPConnection(proxy.upstream, timeout=30)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    response = upstream.getresponse()
                    payload = response.read()
                    if fault == "lost":  # the request took effect, its answer never arrives
                        self.close_connection = True
                        return
                    self.send_response(response.status, response.reason)
                    for key, value in response.getheaders():
                        if key.lower() not in _HOP_BY_HOP and not (key.lower() == "content-length" and self.command != "HEAD"):
                            self.send_header(key, value)
                    if self.command != "HEAD":
                        self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                finally:
                    upstream.close()

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _proxy

        return Handler


@pytest.fixture(params=["file", "s3"])
def store_root(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """One store root per backend, so behavioural tests run against both."""
    if request.param == "s3":
        return request.getfixturevalue("s3_root")
    return (tmp_path / "store").as_uri()


@pytest.fixture
def faulty_proxy(moto_endpoint: str) -> Iterator[FaultyProxy]:
    with FaultyProxy(moto_endpoint) as proxy:
        yield proxy
