"""The client's check of every message the host agent sends (protocol version 2).

The agent's output is input from a host: a message that does not fit the protocol (wrong
types, bad base64, lone surrogates, NaN, non-object JSON, deep nesting, an oversized line) is
a `ProtocolError` with a one-line message, never an exception deep inside a consumer. The
protocol itself (its version, message types and tail events, imported from there) is
specmon/hostside/protocol.py.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

import orjson

from specmon.hosts.base import HostError
from specmon.hostside import protocol as hostside

PROTOCOL_VERSION = hostside.PROTOCOL_VERSION
MAX_MESSAGE = 8 << 20  # the agent's largest real message is a capped 1 MiB line plus base64
MAX_OFFSET = 1 << 62
TAIL_EVENTS = frozenset(hostside.TAIL_EVENTS)
_INT_FIELDS = ("ino", "off", "at", "size", "old_ino", "not_seen", "dev")


class AgentError(HostError):
    """The agent could not start, answered with an error, or went away."""


class ProtocolError(AgentError):
    """The agent sent something that is not protocol version 2 (one-line message)."""


def _snippet(raw: bytes | str) -> str:
    text = raw if isinstance(raw, str) else raw[:80].decode("utf-8", "replace")
    return ascii(text[:80])


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _is_int(v: Any, lo: int = 0, hi: int = MAX_OFFSET) -> bool:
    return type(v) is int and lo <= v <= hi


def _check_text(v: Any, what: str) -> None:
    if not isinstance(v, str):
        raise ProtocolError(f"{what} is not a string")
    try:
        v.encode("utf-8")
    except UnicodeEncodeError:
        raise ProtocolError(f"{what} holds a lone surrogate") from None


def _fast_loads(line: bytes) -> Any:
    """orjson's reading of a message (several times json's: a "lines" message per 256 KiB of
    log is most of what the client reads), or None when orjson refuses it."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


def decode(line: bytes) -> dict[str, Any]:
    """One agent output line -> a message dict whose envelope is checked; ProtocolError else."""
    if len(line) > MAX_MESSAGE:
        raise ProtocolError(f"message of {len(line)} bytes (limit {MAX_MESSAGE})")
    try:
        text = line.decode("utf-8")
    except UnicodeDecodeError:
        raise ProtocolError(f"message is not UTF-8: {_snippet(line)}") from None
    try:
        msg = _fast_loads(line)
        if msg is None:  # orjson refused it: the stdlib reader says why (or takes what orjson
            msg = json.loads(text, parse_constant=_reject_constant)  # refuses, e.g. 2**70)
    except RecursionError:
        raise ProtocolError(f"message nested too deeply: {_snippet(text)}") from None
    except ValueError as exc:
        reason = str(exc).splitlines()[0][:80]
        raise ProtocolError(f"message is not JSON ({reason}): {_snippet(text)}") from None
    if not isinstance(msg, dict):
        raise ProtocolError(f"message is a JSON {type(msg).__name__}, not an object: "
                            f"{_snippet(text)}")
    kind = msg.get("t")
    check = _CHECKS.get(kind) if isinstance(kind, str) else None
    if check is None:
        raise ProtocolError(f"unknown message type {_snippet(str(kind))}")
    check(msg)
    return msg


def _check_hello(msg: dict[str, Any]) -> None:
    if type(msg.get("v")) is not int:
        raise ProtocolError("hello without an integer version")


def _check_reply(msg: dict[str, Any]) -> None:
    rid = msg.get("id")
    if rid is not None and type(rid) is not int:
        raise ProtocolError("reply id is not an integer")
    if type(msg.get("ok")) is not bool:
        raise ProtocolError("reply without a boolean 'ok'")
    if not msg["ok"]:
        _check_text(msg.get("error"), "reply error")


def _check_lines(msg: dict[str, Any]) -> None:
    if not _is_int(msg.get("tail")):
        raise ProtocolError("lines: 'tail' is not a tail id")
    if not _is_int(msg.get("ino")):
        raise ProtocolError(f"lines: inode {ascii(msg.get('ino'))[:40]} is not an integer")
    if not _is_int(msg.get("cost")):
        raise ProtocolError("lines: 'cost' is not a byte count")
    _check_items(msg.get("lines"))


def _check_items(items: Any, what: str = "lines") -> None:
    """The line items of a "lines" message or a "head" event: consecutive [off, end, text]."""
    if not isinstance(items, list) or not items:
        raise ProtocolError(f"{what}: 'lines' is not a non-empty list")
    prev_end: int | None = None
    for item in items:
        if not isinstance(item, list) or len(item) not in (3, 4):
            raise ProtocolError(f"{what}: an item is not [off, end, text(, extra)]")
        off, end, text = item[0], item[1], item[2]
        if not (_is_int(off) and _is_int(end) and off <= end):
            raise ProtocolError(f"{what}: bad offsets {ascii(item[:2])[:80]}")
        if prev_end is not None and off != prev_end:
            raise ProtocolError(f"{what}: offset {off} does not follow {prev_end}")
        prev_end = end
        _check_text(text, f"{what}: text")
        if len(item) == 4:
            _check_extra(item[3], end - off)


def _check_extra(extra: Any, span: int) -> None:
    if not isinstance(extra, dict):
        raise ProtocolError("lines: item extra is not an object")
    b64 = extra.get("b64")
    if b64 is not None:
        if not isinstance(b64, str):
            raise ProtocolError("lines: b64 is not a string")
        try:
            raw = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            raise ProtocolError(f"lines: invalid base64 {_snippet(b64)}") from None
        if len(raw) > span:
            raise ProtocolError("lines: b64 holds more bytes than the line's offsets")
    cut = extra.get("cut")
    if cut is not None and not _is_int(cut):
        raise ProtocolError("lines: 'cut' is not a length")
    noeol = extra.get("noeol")
    if noeol is not None and type(noeol) is not bool:
        raise ProtocolError("lines: 'noeol' is not a boolean")


def _check_tail(msg: dict[str, Any]) -> None:
    if not _is_int(msg.get("tail")):
        raise ProtocolError("tail event: 'tail' is not a tail id")
    if msg.get("ev") not in TAIL_EVENTS:
        raise ProtocolError(f"tail event: unknown event {ascii(msg.get('ev'))[:40]}")
    for k in _INT_FIELDS:
        v = msg.get(k)
        if v is not None and not _is_int(v):
            raise ProtocolError(f"tail event: {k!r} is not an integer")
    if msg["ev"] == "opened" and not (_is_int(msg.get("ino")) and _is_int(msg.get("off"))):
        raise ProtocolError("tail event: 'opened' without inode and offset")
    if msg["ev"] == "rotated" and not _is_int(msg.get("ino")):
        raise ProtocolError("tail event: 'rotated' without the new inode")
    if msg["ev"] == "head":
        if not _is_int(msg.get("ino")):
            raise ProtocolError("tail event: 'head' without an inode")
        _check_items(msg.get("lines"), "head")
    for k in ("path", "error", "copy", "reason"):
        v = msg.get(k)
        if v is not None:
            _check_text(v, f"tail event: {k!r}")


def _check_gpu(msg: dict[str, Any]) -> None:
    if not _is_int(msg.get("stream")):
        raise ProtocolError("gpu: 'stream' is not a stream id")
    rec = msg.get("rec")
    if not isinstance(rec, dict) or not isinstance(rec.get("gpus"), list) or not all(
            isinstance(g, dict) for g in rec["gpus"]):
        raise ProtocolError("gpu: 'rec' is not a sample with a list of GPU objects")


def _check_gpu_end(msg: dict[str, Any]) -> None:
    if not _is_int(msg.get("stream")):
        raise ProtocolError("gpu_end: 'stream' is not a stream id")


_CHECKS = {"hello": _check_hello, "reply": _check_reply, "lines": _check_lines,
           "tail": _check_tail, "gpu": _check_gpu, "gpu_end": _check_gpu_end}
