"""amaris's Prefect server socket: its connections send small answers at once."""

from __future__ import annotations

import socket

from amaris.app.prefect_server import listening_socket


def test_connections_accepted_by_amaris_prefect_server_have_nagle_off() -> None:
    listener = listening_socket(None)
    client = socket.create_connection(listener.getsockname())
    accepted, _ = listener.accept()
    try:
        # Off: an answer written in two segments would wait on the client's delayed ACK.
        assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        for sock in (accepted, client, listener):
            sock.close()
