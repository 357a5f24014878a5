#!/usr/bin/env python3
"""Receives and decodes what the C4 net plugin sends to its node agent (C4_AGENT_SOCKET).

The plugin sends CBOR datagrams (RankReport, AnomalyNotice, ...; schema version 1, string keys)
to a Unix datagram socket. This stands in for the node plugin where there is none (a GPU machine
running bench/real-nccl.sh): it needs only the Python standard library.

  rank_report.py listen PATH [--timeout S] [--count N]   # one JSON line per message on stdout
  rank_report.py summary FILE                            # the newest RankReport of each rank,
                                                         # and connections closed before it
  rank_report.py decode FILE.cbor                        # one datagram from a file

PATH starting with '@' is an abstract socket. `listen` stops after --count messages (0: no
limit), after --timeout seconds without a message, or on SIGTERM/SIGINT.
"""

import argparse
import json
import os
import signal
import socket
import struct
import sys

SCHEMA_VERSION = 1
KINDS = ("RankReport", "ProgressNotice", "CheckpointNotice", "AnomalyNotice")


class CborError(ValueError):
    pass


def _decode(buf, pos, depth):
    if depth > 64:
        raise CborError("nesting deeper than 64")
    if pos >= len(buf):
        raise CborError("truncated")
    ib = buf[pos]
    pos += 1
    major, info = ib >> 5, ib & 0x1F

    def argument(pos):
        if info < 24:
            return info, pos
        width = {24: 1, 25: 2, 26: 4, 27: 8}.get(info)
        if width is None:
            return None, pos  # indefinite length (31) or reserved
        if pos + width > len(buf):
            raise CborError("truncated")
        return int.from_bytes(buf[pos:pos + width], "big"), pos + width

    if major == 7:
        if info == 20:
            return False, pos
        if info == 21:
            return True, pos
        if info in (22, 23):
            return None, pos
        if info in (25, 26, 27):
            width, fmt = {25: (2, ">e"), 26: (4, ">f"), 27: (8, ">d")}[info]
            if pos + width > len(buf):
                raise CborError("truncated")
            return struct.unpack(fmt, buf[pos:pos + width])[0], pos + width
        if info < 24:
            return info, pos
        raise CborError("unsupported simple value %d" % info)
    n, pos = argument(pos)
    if major == 0:
        return n, pos
    if major == 1:
        return -1 - n, pos
    if major == 6:  # tag: keep the value
        return _decode(buf, pos, depth + 1)
    if major in (2, 3):
        if n is None:  # indefinite: chunks until break
            parts = []
            while True:
                if pos >= len(buf):
                    raise CborError("truncated")
                if buf[pos] == 0xFF:
                    pos += 1
                    break
                chunk, pos = _decode(buf, pos, depth + 1)
                parts.append(chunk)
            data = b"".join(p.encode() if isinstance(p, str) else p for p in parts)
        else:
            if pos + n > len(buf):
                raise CborError("truncated")
            data, pos = bytes(buf[pos:pos + n]), pos + n
        return (data.decode("utf-8") if major == 3 else data), pos
    if major == 4:
        out = []
        while n is None or len(out) < n:
            if n is None and pos < len(buf) and buf[pos] == 0xFF:
                return out, pos + 1
            item, pos = _decode(buf, pos, depth + 1)
            out.append(item)
        return out, pos
    if major == 5:
        out = {}
        while n is None or len(out) < n:
            if n is None and pos < len(buf) and buf[pos] == 0xFF:
                return out, pos + 1
            key, pos = _decode(buf, pos, depth + 1)
            value, pos = _decode(buf, pos, depth + 1)
            out[key] = value
        return out, pos
    raise CborError("bad initial byte 0x%02x" % ib)


def decode_cbor(data):
    value, pos = _decode(memoryview(data), 0, 0)
    if pos != len(data):
        raise CborError("%d trailing bytes" % (len(data) - pos))
    return value


def decode_message(data):
    """A plugin message as a dict; raises ValueError when it is not one."""
    msg = decode_cbor(data)
    if not isinstance(msg, dict):
        raise ValueError("not a CBOR map")
    if msg.get("v") != SCHEMA_VERSION:
        raise ValueError("schema version %r, want %d" % (msg.get("v"), SCHEMA_VERSION))
    if msg.get("kind") not in KINDS:
        raise ValueError("unknown kind %r" % msg.get("kind"))
    return msg


def listen(path, timeout, count):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    address = "\0" + path[1:] if path.startswith("@") else path
    if not path.startswith("@") and os.path.exists(path):
        os.unlink(path)
    sock.bind(address)
    sock.settimeout(timeout)

    class Stop(Exception):
        pass

    def on_signal(*_):
        raise Stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    seen = 0
    try:
        while count == 0 or seen < count:
            try:
                data = sock.recv(256 * 1024)
            except (socket.timeout, Stop):
                break
            try:
                msg = decode_message(data)
            except ValueError as e:
                print(json.dumps({"undecodable": str(e), "bytes": len(data)}), flush=True)
                continue
            print(json.dumps(msg, sort_keys=True), flush=True)
            seen += 1
    finally:
        sock.close()
        if not path.startswith("@") and os.path.exists(path):
            os.unlink(path)
    return 0


def summary(lines):
    """The newest RankReport per rank (parts merged), as readable text.

    A connection closed before that report (the plugin reports open connections only) is listed
    after it with the counters of the last report that carried it, so the summary of a finished
    job still shows every connection it had."""
    newest = {}
    seen = {}  # rank -> connection id -> (seq, connection)
    for line in lines:
        line = line.strip()
        if not line:
            continue
        msg = json.loads(line)
        if msg.get("kind") != "RankReport":
            continue
        rank = msg["id"]["rank"]
        key = (msg["seq"], msg["part"])
        for c in msg["connections"]:
            conns = seen.setdefault(rank, {})
            if c["id"] not in conns or msg["seq"] >= conns[c["id"]][0]:
                conns[c["id"]] = (msg["seq"], c)
        cur = newest.get(rank)
        if cur is None or msg["seq"] > cur["seq"]:
            newest[rank] = dict(msg, connections=list(msg["connections"]), _parts={key})
        elif msg["seq"] == cur["seq"] and key not in cur["_parts"]:
            cur["connections"] += msg["connections"]
            cur["_parts"].add(key)

    def conn_line(c, suffix):
        return ("  conn %d %s peer rank %d node %s: %d bytes, %d ops, %d in flight; "
                "wait p50/p99 %d/%d us, transfer p50/p99 %d/%d us; subflow bytes %s%s" %
                (c["id"], c["direction"], c["peerRank"], c["peerNode"] or "-", c["bytes"],
                 c["ops"], c["inflight"], c["wait"]["p50Us"], c["wait"]["p99Us"],
                 c["transfer"]["p50Us"], c["transfer"]["p99Us"],
                 [s["bytes"] for s in c["subflows"]], suffix))

    out = []
    for rank in sorted(newest):
        r = newest[rank]
        ident = r["id"]
        out.append("RankReport rank=%d node=%s pod=%s pid=%d seq=%d intervalMs=%d planVersion=%d "
                   "droppedMessages=%d connections=%d" %
                   (rank, ident["node"] or "-", ident["pod"] or "-", ident["pid"], r["seq"],
                    r["intervalMs"], r["planVersion"], r["droppedMessages"],
                    len(r["connections"])))
        for c in sorted(r["connections"], key=lambda c: c["id"]):
            out.append(conn_line(c, ""))
        open_ids = {c["id"] for c in r["connections"]}
        for cid in sorted(seen.get(rank, {})):
            if cid in open_ids:
                continue
            seq, c = seen[rank][cid]
            out.append(conn_line(c, " (closed; last reported in seq %d)" % seq))
    return out


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    ls = sub.add_parser("listen")
    ls.add_argument("path")
    ls.add_argument("--timeout", type=float, default=600)
    ls.add_argument("--count", type=int, default=0)
    sm = sub.add_parser("summary")
    sm.add_argument("file")
    dc = sub.add_parser("decode")
    dc.add_argument("file")
    a = ap.parse_args(argv)
    if a.cmd == "listen":
        return listen(a.path, a.timeout, a.count)
    if a.cmd == "summary":
        with open(a.file) as f:
            lines = summary(f)
        print("\n".join(lines) if lines else "no RankReport received")
        return 0 if lines else 1
    with open(a.file, "rb") as f:
        print(json.dumps(decode_message(f.read()), indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
