"""The notices' wire format: C4's report schema v1 as CBOR (common/src/report_schema.h).

The encoder writes what C4's C++ encoder (nlohmann::json::to_cbor) writes for the same values:
definite lengths, the shortest integer heads, map keys in byte order.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Any, Dict, Union

SCHEMA_VERSION = 1
MAX_RANK = 16_777_216
MAX_NAME_BYTES = 253
MAX_TEXT_BYTES = 4096
MAX_PAUSE_SECONDS = 86_400
MAX_DATAGRAM_BYTES = 200 * 1024
INT64_MAX = (1 << 63) - 1

STATES = ("training", "checkpointing", "evaluating", "idle", "finished")
PAUSES = ("checkpointing", "evaluating", "idle")

Value = Union[bool, int, str, list, Dict[str, Any]]


def _head(major: int, arg: int) -> bytes:
    if arg < 24:
        return bytes([major << 5 | arg])
    if arg <= 0xFF:
        return bytes([major << 5 | 24, arg])
    if arg <= 0xFFFF:
        return bytes([major << 5 | 25]) + struct.pack(">H", arg)
    if arg <= 0xFFFFFFFF:
        return bytes([major << 5 | 26]) + struct.pack(">I", arg)
    return bytes([major << 5 | 27]) + struct.pack(">Q", arg)


def encode(value: Value) -> bytes:
    """CBOR of ints, strings, bools, lists and str-keyed dicts (keys sorted by their bytes)."""
    if isinstance(value, bool):
        return b"\xf5" if value else b"\xf4"
    if isinstance(value, int):
        if not -(1 << 64) <= value < (1 << 64):
            raise ValueError(f"integer {value} does not fit CBOR")
        return _head(0, value) if value >= 0 else _head(1, -1 - value)
    if isinstance(value, str):
        raw = value.encode("utf-8")
        return _head(3, len(raw)) + raw
    if isinstance(value, (list, tuple)):
        return _head(4, len(value)) + b"".join(encode(v) for v in value)
    if isinstance(value, dict):
        items = sorted((k.encode("utf-8"), v) for k, v in value.items())
        return _head(5, len(items)) + b"".join(
            _head(3, len(k)) + k + encode(v) for k, v in items)
    raise TypeError(f"cannot encode {type(value).__name__} as CBOR")


@dataclass(frozen=True)
class Identity:
    """Who sends: RankIdentity of the schema."""

    namespace: str
    job: str
    pod: str
    node: str
    rank: int
    world_size: int
    restart_attempt: int
    pid: int

    def to_wire(self) -> Dict[str, Value]:
        return {
            "namespace": self.namespace,
            "job": self.job,
            "pod": self.pod,
            "node": self.node,
            "rank": self.rank,
            "worldSize": self.world_size,
            "restartAttempt": self.restart_attempt,
            "pid": self.pid,
        }


def progress_notice(identity: Identity, time_unix_ns: int, step: int, state: str,
                    expected_seconds: int = 0) -> bytes:
    """A ProgressNotice; expectedSeconds is left out when 0, as the C++ encoder does."""
    doc: Dict[str, Value] = {
        "v": SCHEMA_VERSION,
        "kind": "ProgressNotice",
        "id": identity.to_wire(),
        "timeUnixNs": time_unix_ns,
        "step": step,
        "state": state,
    }
    if expected_seconds:
        doc["expectedSeconds"] = expected_seconds
    return encode(doc)


def checkpoint_notice(identity: Identity, time_unix_ns: int, step: int, path: str) -> bytes:
    """A CheckpointNotice."""
    return encode({
        "v": SCHEMA_VERSION,
        "kind": "CheckpointNotice",
        "id": identity.to_wire(),
        "timeUnixNs": time_unix_ns,
        "step": step,
        "path": path,
    })
