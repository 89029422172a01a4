"""The host's reader: data that is waiting is read at once, an empty input waits until data,
end of input or the close wake-up, and the host's descriptor keeps its blocking mode."""

from __future__ import annotations

import os
import socket
import threading
import time

from mcpsync.gateway._hostread import MAX_SKIP, HostReader


def test_reads_what_waits_waits_for_more_and_wakes_for_close() -> None:
    r, w = os.pipe()
    wake_r, wake_w = os.pipe()
    try:
        reader = HostReader(r, wake_r, 1024)
        os.write(w, b'{"a":1}\n')
        assert reader.read() == b'{"a":1}\n'
        # Many reads of an input that is empty at first: each waits and gets its frame,
        # through the tries that miss and the reads that skip the try.
        for i in range(3 * MAX_SKIP):
            later = threading.Timer(0.002, os.write, (w, f"{i}\n".encode()))
            later.start()
            assert reader.read() == f"{i}\n".encode()
            later.join()
        assert os.get_blocking(r)   # the host's descriptor is left as it was
        threading.Timer(0.05, os.write, (wake_w, b"\0")).start()
        started = time.monotonic()
        assert reader.read() is None
        assert time.monotonic() - started >= 0.04
        os.close(w)
        w = -1
        os.read(wake_r, 1)
        assert reader.read() == b""   # end of input
    finally:
        for fd in (r, w, wake_r, wake_w):
            if fd >= 0:
                os.close(fd)


def test_a_socket_input_is_read_too() -> None:
    a, b = socket.socketpair()
    wake_r, wake_w = os.pipe()
    try:
        reader = HostReader(a.fileno(), wake_r, 1024)
        b.sendall(b"one\n")
        assert reader.read() == b"one\n"
        b.sendall(b"two\n")
        assert reader.read() == b"two\n"
    finally:
        a.close()
        b.close()
        os.close(wake_r)
        os.close(wake_w)
