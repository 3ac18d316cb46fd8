"""SSH failures say what is wrong, over the real sshd (issue 16)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kit import sshd
from kit.ssh_faults import second_sshd  # noqa: F401
from kit.ssh_host import make_host

from specmon.hosts.base import HostError, HostKeyChanged, HostKeyError, HostKeyUnknown
from specmon.hosts.ssh import SshHost

sshd_server = sshd.sshd_server


async def fails(host: SshHost) -> HostError:
    with pytest.raises(HostError) as info:
        await host.connect()
    await host.close()
    msg = str(info.value)
    assert "\n" not in msg and msg != "retry"
    return info.value


async def test_accept_new_with_known_hosts_dev_null_connects_for_this_session(sshd_server,
                                                                            tmp_path):
    cfg = sshd_server.write_client_config(tmp_path / "cfg", Path("/dev/null"))
    host = SshHost("testbox", ssh_config=cfg, accept_new=True)
    await host.connect()
    try:
        assert (await host.run("echo ok")).stdout == "ok\n"
        assert host.notes and "for this session only" in host.notes[0]
        assert "/dev/null" in host.notes[0]
    finally:
        await host.close()
    # and without --accept-new it is an unknown key, named as such
    err = await fails(SshHost("testbox", ssh_config=cfg))
    assert isinstance(err, HostKeyUnknown) and "--accept-new" in str(err)


async def test_missing_identity_file_is_named(sshd_server, tmp_path):
    kh = sshd_server.write_known_hosts(tmp_path / "kh")
    missing = tmp_path / "no_such_key"
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host box\n  HostName 127.0.0.1\n  Port {sshd_server.port}\n"
                   f"  User {sshd_server.user}\n  IdentityFile {missing}\n  IdentitiesOnly yes\n"
                   f"  UserKnownHostsFile {kh}\n")
    err = await fails(SshHost("box", ssh_config=cfg))
    assert str(err) == f"box: IdentityFile {missing}: No such file or directory"


async def test_revoked_key_is_refused_and_never_added(sshd_server, tmp_path):
    kind, data = sshd_server.host_key.with_suffix(".pub").read_text().split()[:2]
    kh = tmp_path / "kh"
    kh.write_text(f"@revoked [127.0.0.1]:{sshd_server.port} {kind} {data}\n")
    before = kh.read_text()
    cfg = sshd_server.write_client_config(tmp_path / "cfg", kh)
    err = await fails(SshHost("testbox", ssh_config=cfg, accept_new=True))
    assert isinstance(err, HostKeyError) and "@revoked" in str(err)
    assert kh.read_text() == before  # not appended as trusted


async def test_plain_host_entry_does_not_count_for_another_port(sshd_server, tmp_path):
    """Like OpenSSH: on port N only `[host]:N` entries count, so a bare `127.0.0.1` entry
    with another key is not "HOST KEY CHANGED" (nor would it be trusted)."""
    other = sshd.keygen(tmp_path / "other")
    kind, data = other.with_suffix(".pub").read_text().split()[:2]
    kh = tmp_path / "kh"
    kh.write_text(f"127.0.0.1 {kind} {data}\n")
    cfg = sshd_server.write_client_config(tmp_path / "cfg", kh)
    err = await fails(SshHost("testbox", ssh_config=cfg))
    assert isinstance(err, HostKeyUnknown), err
    assert f"[127.0.0.1]:{sshd_server.port}" in str(err)
    # with the target's key under the bare name only: still unknown on this port
    kind, data = sshd_server.host_key.with_suffix(".pub").read_text().split()[:2]
    kh.write_text(f"127.0.0.1 {kind} {data}\n")
    assert isinstance(await fails(SshHost("testbox", ssh_config=cfg)), HostKeyUnknown)
    # and with `[127.0.0.1]:PORT` it connects
    host = make_host(sshd_server, tmp_path)
    await host.connect()
    await host.close()


def jump_config(tmp_path: Path, jump: sshd.Sshd, target: sshd.Sshd, kh: Path) -> Path:
    behind = (f"Host behind\n  HostName 127.0.0.1\n  Port {target.port}\n  User {target.user}\n"
              f"  IdentityFile {target.client_key}\n  IdentitiesOnly yes\n"
              f"  UserKnownHostsFile {kh}\n  ProxyJump jumpbox\n")
    return jump.write_client_config(tmp_path / "cfg", kh, alias="jumpbox", extra=behind)


async def test_jump_host_key_errors_name_the_jump_host(sshd_server, second_sshd, tmp_path):  # noqa: F811
    kh = tmp_path / "kh"
    kh.write_text(second_sshd.known_hosts_line())  # the target is known, the jump host not
    cfg = jump_config(tmp_path, sshd_server, second_sshd, kh)
    err = await fails(SshHost("behind", ssh_config=cfg, accept_new=True))
    assert isinstance(err, HostKeyUnknown)
    assert str(err).startswith(f"unknown host key for jump host jumpbox "
                               f"([127.0.0.1]:{sshd_server.port})")
    assert kh.read_text() == second_sshd.known_hosts_line()  # nothing added for the jump
    # the jump host's key changed
    other = sshd.keygen(tmp_path / "other")
    kh.write_text(second_sshd.known_hosts_line() + sshd_server.known_hosts_line(other))
    err = await fails(SshHost("behind", ssh_config=cfg))
    assert isinstance(err, HostKeyChanged) and "jump host jumpbox" in str(err)


def test_record_says_when_a_host_key_is_trusted_for_this_session_only(sshd_server, tmp_path):
    """The note reaches the user: record (and connect) print it on stderr after connecting."""
    import subprocess
    import sys

    cfg = sshd_server.write_client_config(tmp_path / "cfg", Path("/dev/null"))
    log = tmp_path / "srv.log"
    log.write_text("first\n")
    res = subprocess.run([sys.executable, "-m", "specmon", "record", "testbox", "--ssh-config",
                          str(cfg), "--accept-new", "--log", f"srv={log}", "--duration", "2",
                          "--out", str(tmp_path / "o.jsonl")],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    notes = [ln for ln in res.stderr.splitlines() if "for this session only" in ln]
    assert len(notes) == 1 and notes[0].startswith("specmon: testbox: accepted host key")


async def test_a_refused_connection_and_a_proxyjump_say_so_in_words(sshd_server, tmp_path):
    """asyncio's "Connect call failed ('127.0.0.1', 1)" (a Python tuple) was the whole message
    of a wrong Port; a ProxyJump host that does not resolve read as the target's failure."""
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    kh = sshd_server.write_known_hosts(tmp_path / "kh")
    cfg = tmp_path / "cfg"
    cfg.write_text(f"Host box\n  HostName 127.0.0.1\n  Port {port}\n  UserKnownHostsFile {kh}\n"
                   f"Host hop\n  HostName 127.0.0.1\n  Port {sshd_server.port}\n"
                   f"  ProxyJump nosuchjumphost.invalid\n  UserKnownHostsFile {kh}\n")
    err = await fails(SshHost("box", ssh_config=cfg))
    assert str(err) == "box: Connection refused", str(err)
    err = await fails(SshHost("hop", ssh_config=cfg))
    assert "through ProxyJump nosuchjumphost.invalid" in str(err), str(err)

