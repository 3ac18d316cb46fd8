"""Messages from feeds (workers) to the app: one per `FeedSink` event, same fields.

The app's sink posts them; each handler calls the same-named method of the session model, so
the UI changes state exactly as headless record and replay do. High-rate ones are batched by
the feed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from textual.message import Message

from specmon.hosts.base import ConnectionState
from specmon.parse.gpu import GpuSample
from specmon.session.events import LineItem, ServerInfo


@dataclass
class ServerLines(Message):
    host: str
    server: str
    items: Sequence[LineItem]


@dataclass
class GpuUpdate(Message):
    host: str
    samples: Sequence[GpuSample]
    error: str | None = None


@dataclass
class ServerExited(Message):
    host: str
    server: str
    code: int | None


@dataclass
class ServerNotice(Message):
    host: str
    server: str
    text: str


@dataclass
class TailMissing(Message):
    host: str
    server: str
    path: str
    reason: str


@dataclass
class ServerDeclared(Message):
    host: str
    server: str
    role: str | None
    path: str | None


@dataclass
class HostStateChanged(Message):
    host: str
    state: ConnectionState


@dataclass
class HostServers(Message):
    host: str
    infos: Sequence[ServerInfo]


@dataclass
class ServerPids(Message):
    host: str
    server: str
    pids: Sequence[int]


@dataclass
class ServerProbe(Message):
    """The fingerprint probe of a launch (SGLang version, files modified against RECORD)."""

    host: str
    server: str
    probe: dict[str, Any]


@dataclass
class BaselineRequest(Message):
    """A feed (a scenario) asks for a baseline of a server, as if the user pressed the key."""

    host: str
    server: str
