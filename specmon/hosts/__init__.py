"""specmon.hosts: where things run (LocalHost, SshHost) behind one Host interface."""

from __future__ import annotations

import os
from typing import Any

from specmon.hosts.base import (
    ConnectionState,
    Host,
    HostAuthError,
    HostError,
    HostKeyChanged,
    HostKeyError,
    HostKeyUnknown,
)

__all__ = [
    "ConnectionState",
    "Host",
    "HostAuthError",
    "HostError",
    "HostKeyChanged",
    "HostKeyError",
    "HostKeyUnknown",
    "make_host",
]


def make_host(
    target: str,
    *,
    ssh_config: str | os.PathLike[str] | None = None,
    known_hosts: str | os.PathLike[str] | None = None,
    accept_new: bool = False,
    **kwargs: Any,
) -> Host:
    """`local` -> LocalHost; `[USER@]HOST[:PORT]` (or an ~/.ssh/config alias) -> SshHost.

    Raises ValueError for a malformed target. asyncssh is imported only for SSH targets.
    """
    if target == "local":
        from specmon.hosts.local import LocalHost

        return LocalHost()
    from specmon.hosts.ssh import SshHost

    return SshHost.from_target(
        target, ssh_config=ssh_config, known_hosts=known_hosts, accept_new=accept_new, **kwargs
    )
