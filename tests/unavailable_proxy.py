"""An HTTP proxy in front of an engine that answers 503 to everything while it is told to: an engine that
is overloaded or restarting, as SGLang's router sees it."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests


class UnavailableProxy:
    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.unavailable = threading.Event()
        self.refused = 0  # requests answered 503
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> UnavailableProxy:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _forward(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                if proxy.unavailable.is_set():
                    proxy.refused += 1
                    self._answer(503, {"Content-Type": "text/plain"}, b"unavailable")
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
                upstream = requests.request(self.command, proxy.upstream + self.path, data=body, headers=headers,
                                            timeout=600)
                passed = {k: v for k, v in upstream.headers.items()
                          if k.lower() not in ("content-length", "transfer-encoding", "connection", "content-encoding")}
                self._answer(upstream.status_code, passed, upstream.content)

            def _answer(self, status: int, headers: dict, body: bytes) -> None:
                self.send_response(status)
                for key, value in headers.items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_DELETE = _forward

        return Handler
