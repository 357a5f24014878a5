"""One datagram to the node plugin's unix socket, then a short wait until it is read."""

from __future__ import annotations

import fcntl
import socket
import struct
import termios
import time
from typing import Optional

# SIOCOUTQ on a unix socket: bytes this socket sent that the receiver has not read yet.
# Linux defines it as TIOCOUTQ.
_SIOCOUTQ = termios.TIOCOUTQ
LINGER_SECONDS = 0.5


def _address(path: str) -> str:
    """'@name' is the abstract socket 'name', as C4's C++ code spells it."""
    if not path:
        raise ValueError("unix socket path is empty")
    if "\0" in path:
        raise ValueError("unix socket path contains a NUL byte")
    abstract = path.startswith("@")
    cap = 108 if abstract else 107
    if len(path.encode("utf-8", "surrogateescape")) > cap:
        raise ValueError(f'unix socket path "{path}" is longer than {cap} bytes')
    return "\0" + path[1:] if abstract else path


def _unread(sock: socket.socket) -> int:
    raw = fcntl.ioctl(sock.fileno(), _SIOCOUTQ, struct.pack("i", 0))
    return struct.unpack("i", raw)[0]


def send(path: str, data: bytes, linger: float = LINGER_SECONDS) -> Optional[str]:
    """Sends `data` as one datagram to `path`; None when sent, else why not.

    After a send it waits, at most `linger` seconds, until the receiver has read the datagram:
    the node plugin tells the sender's pod by the sender's live pid.
    """
    try:
        address = _address(path)
    except ValueError as e:
        return str(e)
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as sock:
        try:
            sent = sock.sendto(data, socket.MSG_DONTWAIT | socket.MSG_NOSIGNAL, address)
        except OSError as e:
            return e.strerror or str(e)
        if sent != len(data):
            return "datagram truncated"
        deadline = time.monotonic() + linger
        try:
            while _unread(sock) > 0 and time.monotonic() < deadline:
                time.sleep(0.001)
        except OSError:
            pass  # no queue to watch: sent is all we know
    return None
