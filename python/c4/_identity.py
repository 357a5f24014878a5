"""The rank's identity from the environment the operator sets, read as C4's plugins read it
(common/src/rank_telemetry.cc: loadRankEnv, sanitizeName)."""

from __future__ import annotations

import os
import re
import socket
from typing import Mapping, Optional, Tuple

from ._wire import MAX_NAME_BYTES, MAX_RANK, Identity

_INT = re.compile(r"-?[0-9]+\Z")
_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789")
_LOWER_ALNUM = frozenset(b"abcdefghijklmnopqrstuvwxyz0123456789")


def is_dns_subdomain(name: bytes) -> bool:
    """A Kubernetes DNS-1123 subdomain (lower case, labels start and end alphanumeric)."""
    if not name or len(name) > MAX_NAME_BYTES:
        return False
    if name[0] not in _LOWER_ALNUM or name[-1] not in _LOWER_ALNUM:
        return False
    for i, c in enumerate(name):
        if c in _LOWER_ALNUM or c == ord("-"):
            continue
        if c == ord(".") and name[i - 1] in _LOWER_ALNUM and name[i + 1] in _LOWER_ALNUM:
            continue
        return False
    return True


def sanitize_name(name: str) -> str:
    """What the plugins make of a name: lower case, other bytes '-', trimmed; '' if not DNS."""
    raw = name.encode("utf-8", "surrogateescape")[:MAX_NAME_BYTES]
    out = bytearray()
    for c in raw:
        if c in _ALNUM:
            out.append(c | 0x20 if 0x41 <= c <= 0x5A else c)
        elif c in (ord("-"), ord(".")):
            out.append(c)
        else:
            out.append(ord("-"))
    clean = bytes(out).strip(b"-.")
    if clean and not is_dns_subdomain(clean):
        return ""
    return clean.decode("ascii")


def _integer(env: Mapping[str, str], name: str, default: int, lo: int, hi: int) -> int:
    value = env.get(name)
    if value is None or not _INT.match(value):
        return default
    parsed = int(value)
    return parsed if lo <= parsed <= hi else default


def from_environment(env: Optional[Mapping[str, str]] = None
                     ) -> Tuple[Optional[Identity], Optional[str]]:
    """(identity, None), or (None, why there is none) - c4-notify's words."""
    env = os.environ if env is None else env
    rank_name = "RANK" if "C4_RANK" not in env and "RANK" in env else "C4_RANK"
    rank = _integer(env, rank_name, -1, -1, MAX_RANK - 1)
    node = sanitize_name(socket.gethostname())
    if "C4_NODE_NAME" in env:
        node = sanitize_name(env["C4_NODE_NAME"])
    names = {k: sanitize_name(env.get(k, "")) for k in ("C4_POD_NAME", "C4_JOB", "C4_NAMESPACE")}
    world_size = _integer(env, "WORLD_SIZE", 0, 0, MAX_RANK)
    if world_size > 0 and rank >= world_size:
        world_size = 0
    attempt = _integer(env, "C4_RESTART_ATTEMPT", 0, 0, 1 << 30)
    if rank < 0:
        return None, "no rank: set C4_RANK or RANK (the operator sets them)"
    if not names["C4_JOB"] or not names["C4_NAMESPACE"]:
        return None, ("no job identity: C4_JOB and C4_NAMESPACE are unset "
                      "(run inside a TrainingJob pod)")
    return Identity(namespace=names["C4_NAMESPACE"], job=names["C4_JOB"],
                    pod=names["C4_POD_NAME"], node=node, rank=rank, world_size=world_size,
                    restart_attempt=attempt, pid=os.getpid()), None
