"""`[USER@]HOST[:PORT]` (IPv6 as `[ADDR]:PORT`), read by one function: the config check and the
SSH connection must agree on what a target means (a leaf module: config and hosts both use it,
and neither may import the other)."""

from __future__ import annotations

from dataclasses import dataclass

from specmon.numfmt import ascii_port


@dataclass(frozen=True)
class SshTarget:
    host: str
    user: str | None = None
    port: int | None = None


def read_target(text: str) -> SshTarget | str:
    """The target, or why it cannot be connected to (a phrase, without the text itself)."""
    user: str | None = None
    rest = text.strip()
    if "@" in rest:
        user, rest = rest.rsplit("@", 1)
        if not user:
            return "empty user name"
    port: str | None = None
    if rest.startswith("["):
        rest, sep, tail = rest[1:].partition("]")
        if not sep:
            return "unclosed '['"
        if tail and not tail.startswith(":"):
            return f"unexpected {tail!r} after ']'"
        port = tail[1:] if tail else None
    elif rest.count(":") == 1:
        rest, port = rest.split(":")
    number = ascii_port(port) if port is not None else None  # ("1"*5000: int() raised)
    if port is not None and number is None:
        return f"bad SSH port {port if len(port) <= 12 else port[:9] + '...'!r}"
    if not rest or any(c.isspace() for c in rest):
        return "bad host name"
    return SshTarget(rest, user, number)


def parse_target(text: str) -> SshTarget:
    """`read_target`, raising ValueError (naming the text) when it is malformed."""
    got = read_target(text)
    if isinstance(got, str):
        raise ValueError(f"{got} in {text!r}")
    return got
