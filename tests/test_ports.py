import socket

from infra.ports import free_port


def test_a_port_is_handed_out_once_per_process():
    # Probing 3,000 times draws repeats from the kernel's ephemeral range (birthday odds on about
    # 28,000 ports), which is how an engine and an env service came to share a port.
    ports = [free_port() for _ in range(3000)]
    assert len(set(ports)) == len(ports)


def test_the_port_is_free_to_bind():
    port = free_port()
    with socket.socket() as server:
        server.bind(("127.0.0.1", port))
