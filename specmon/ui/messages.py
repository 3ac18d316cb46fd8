"""Messages from feeds (workers) to the app. High-rate ones are batched by the feed."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from textual.message import Message

from specmon.feed import LineItem


@dataclass
class ServerLines(Message):
    server: str
    items: list[LineItem]


@dataclass
class GpuUpdate(Message):
    samples: list[Any]
    error: str | None = None


@dataclass
class ServerExited(Message):
    server: str
    code: int | None


@dataclass
class ServerNotice(Message):
    server: str
    text: str


@dataclass
class ServerDeclared(Message):
    server: str
    role: str | None
    path: str | None


@dataclass
class ConnectionChanged(Message):
    text: str


@dataclass
class ServerPids(Message):
    server: str
    pids: list[int]


@dataclass
class ServerProbe(Message):
    """Host facts for the server's launch about to start (SGLang version, modified files)."""

    server: str
    probe: dict[str, Any]


@dataclass
class BaselineRequest(Message):
    """A feed (a scenario) asks for a baseline of `server`, as if the user pressed the key."""

    server: str
