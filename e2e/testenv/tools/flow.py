#!/usr/bin/env python3
"""Tiny TCP throughput tool for the netns fabric (one connection, exact source port).

  flow.py server --bind IP --port P            sink: reads every connection to EOF
  flow.py client --dst IP --port P --sport S --seconds T [--connect-timeout s]
      sends for T seconds from source port S, half-closes, waits until the server has read
      everything, and prints the goodput in Mbit/s (0 if the connection fails).
"""
import argparse
import socket
import sys
import threading
import time


def serve(args):
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind((args.bind, args.port))
    srv.listen(64)

    def sink(conn):
        with conn:
            while conn.recv(1 << 20):
                pass

    while True:
        conn, _ = srv.accept()
        threading.Thread(target=sink, args=(conn,), daemon=True).start()


def client(args):
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", args.sport))
    s.settimeout(args.connect_timeout)
    try:
        s.connect((args.dst, args.port))
    except OSError as e:
        print(f"connect failed: {e}", file=sys.stderr)
        print(0)
        return 0
    s.settimeout(args.seconds + 10)
    buf = b"\0" * (1 << 16)
    sent = 0
    start = time.monotonic()
    try:
        while time.monotonic() - start < args.seconds:
            sent += s.send(buf)
        s.shutdown(socket.SHUT_WR)
        s.recv(1)  # EOF once the server has read everything
    except OSError as e:
        print(f"transfer failed after {sent} bytes: {e}", file=sys.stderr)
        print(0)
        return 0
    elapsed = time.monotonic() - start
    print(int(sent * 8 / elapsed / 1e6))
    return 0


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="mode", required=True)
    ps = sub.add_parser("server")
    ps.add_argument("--bind", required=True)
    ps.add_argument("--port", type=int, required=True)
    pc = sub.add_parser("client")
    pc.add_argument("--dst", required=True)
    pc.add_argument("--port", type=int, required=True)
    pc.add_argument("--sport", type=int, required=True)
    pc.add_argument("--seconds", type=float, default=3)
    pc.add_argument("--connect-timeout", type=float, default=2)
    a = p.parse_args()
    return serve(a) if a.mode == "server" else client(a)


if __name__ == "__main__":
    sys.exit(main())
