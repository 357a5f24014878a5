#!/usr/bin/env python3
"""Forwards a loopback port of the host to an address inside a network namespace (root).

The e2e scenarios reach the operator's /metrics and /debug endpoints from the host; when the
operator runs as a chart pod it listens on its node's fabric address, which exists only inside
that node's network namespace. Every accepted connection is opened from a thread that has entered
the namespace (setns is per thread), then bytes are copied both ways.

  netns_forward.py <netns> <ip:port> <port file>
Writes the chosen host port (127.0.0.1:<port>) to <port file> once listening; runs until killed.
"""
import ctypes
import os
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000
libc = ctypes.CDLL(None, use_errno=True)


def pipe(src, dst):
    try:
        while True:
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(conn, netns, target):
    fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(fd, CLONE_NEWNET) != 0:  # this thread only; it ends with the connection
            raise OSError(ctypes.get_errno(), f"setns {netns}")
    finally:
        os.close(fd)
    try:
        up = socket.create_connection(target, timeout=5)
        up.settimeout(None)
    except OSError:
        conn.close()
        return
    threading.Thread(target=pipe, args=(up, conn), daemon=True).start()
    pipe(conn, up)


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    netns, addr, port_file = sys.argv[1:]
    host, _, port = addr.rpartition(":")
    if not os.path.exists(f"/run/netns/{netns}"):
        print(f"netns_forward: no network namespace {netns}", file=sys.stderr)
        return 1
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    tmp = port_file + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(sock.getsockname()[1]))
    os.replace(tmp, port_file)
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=serve, args=(conn, netns, (host, int(port))), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
