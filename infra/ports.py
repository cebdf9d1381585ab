"""A free local TCP port, for services this machine starts (rendezvous, rollout engines, test servers)."""

from __future__ import annotations

import socket
import threading

# Ports already handed out by this process. A port is only probed free: the child that will listen
# on it binds seconds later (an engine imports torch first), and in between the kernel may offer
# the same port to the next probe. Two of our own services on one port would mean one of them
# answering the other's health check, so a port is never handed out twice.
_issued: set[int] = set()
_lock = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    with _lock:
        while True:
            with socket.socket() as probe:
                probe.bind((host, 0))
                port = probe.getsockname()[1]
            if port not in _issued:
                _issued.add(port)
                return port
