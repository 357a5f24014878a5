#!/usr/bin/env python3
"""Makes a port inside each of some network namespaces reachable from the host's loopback.

    netns_bridge.py --port 9400 --targets-file T.json [--label-key node] NAME=NETNS...

For every NAME=NETNS it listens on a free port of the host's 127.0.0.1 and forwards each
connection to 127.0.0.1:<port> inside /run/netns/NETNS. Then it writes T.json, a Prometheus
file_sd list ([{"targets": ["127.0.0.1:P"], "labels": {"<label-key>": NAME}}, ...]), atomically,
and serves until SIGTERM. The e2e's Prometheus scrapes the node plugins (which listen on their
node netns' loopback, like a hostNetwork pod on a real node) through it.
"""
import argparse
import ctypes
import json
import os
import signal
import socket
import sys
import threading

CLONE_NEWNET = 0x40000000
LIBC = ctypes.CDLL(None, use_errno=True)


def connect_in(netns_fd, port):
    """A TCP connection to 127.0.0.1:port made from inside the netns (this thread only)."""
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    try:
        if LIBC.setns(netns_fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns")
        try:
            s = socket.socket()  # a socket belongs to the netns it was created in
        finally:
            if LIBC.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(own)
    s.settimeout(5)
    s.connect(("127.0.0.1", port))
    s.settimeout(None)
    return s


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


def serve(listener, netns_fd, port):
    while True:
        conn, _ = listener.accept()

        def handle(conn=conn):
            try:
                up = connect_in(netns_fd, port)
            except OSError:
                conn.close()
                return
            threading.Thread(target=pipe, args=(up, conn), daemon=True).start()
            pipe(conn, up)

        threading.Thread(target=handle, daemon=True).start()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--targets-file", required=True)
    ap.add_argument("--label-key", default="node")
    ap.add_argument("pairs", nargs="+", metavar="NAME=NETNS")
    args = ap.parse_args()
    targets = []
    for pair in args.pairs:
        name, sep, netns = pair.partition("=")
        if not sep or not name or not netns:
            sys.exit(f"netns_bridge: bad argument '{pair}' (NAME=NETNS)")
        fd = os.open(f"/run/netns/{netns}", os.O_RDONLY)
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        targets.append({"targets": [f"127.0.0.1:{listener.getsockname()[1]}"],
                        "labels": {args.label_key: name}})
        threading.Thread(target=serve, args=(listener, fd, args.port), daemon=True).start()
    tmp = f"{args.targets_file}.tmp"
    with open(tmp, "w") as f:
        json.dump(targets, f, indent=1)
    os.replace(tmp, args.targets_file)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    threading.Event().wait()


if __name__ == "__main__":
    main()
