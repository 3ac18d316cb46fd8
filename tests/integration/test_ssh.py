"""Integration tests against a real OpenSSH sshd on 127.0.0.1 (see tests/sshd.py)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from kit import sshd
from kit.discovery import FakeServers, run_discovery, wait_log
from kit.ssh_host import make_host, no_connections, record_cmd, ssh_connections
from kit.sshd import keygen
from kit.tail import Collector
from kit.wait import until

from specmon.hosts.base import HostAuthError, HostKeyChanged, HostKeyUnknown
from specmon.hosts.ssh import SshHost, parse_target
from specmon.sources.tail import LogTailer, TailSpec

sshd_server = sshd.sshd_server  # the session-scoped sshd fixture


def fingerprint(pub: Path) -> str:
    out = subprocess.run(["ssh-keygen", "-l", "-E", "sha256", "-f", str(pub)],
                         capture_output=True, text=True, check=True).stdout
    return out.split()[1]








def test_parse_target():
    assert parse_target("gpu1") == parse_target("gpu1")
    t = parse_target("alice@10.0.0.5:2222")
    assert (t.user, t.host, t.port) == ("alice", "10.0.0.5", 2222)
    t = parse_target("[::1]:22")
    assert (t.host, t.port) == ("::1", 22)
    for bad in ("@host", "host:0", "host:x", "[::1", ""):
        with pytest.raises(ValueError):
            parse_target(bad)


async def test_known_key_one_connection_many_channels(sshd_server, tmp_path):
    host = make_host(sshd_server, tmp_path)
    await no_connections(sshd_server)
    await host.connect()
    try:
        res = await host.run("echo out; echo err >&2; exit 3")
        assert (res.rc, res.stdout, res.stderr) == (3, "out\n", "err\n")
        results = await asyncio.gather(*(host.run(["echo", f"a b;{i}"]) for i in range(8)))
        assert [r.stdout for r in results] == [f"a b;{i}\n" for i in range(8)]  # quoted argv
        (tmp_path / "bin").write_bytes(bytes(range(256)))
        assert await host.read_file(str(tmp_path / "bin"), 10, 5) == bytes(range(10, 15))
        async for line in host.stream(["cat"], b"kept open\n"):  # stdin stays open
            assert line == "kept open"
            break
        assert ssh_connections(sshd_server) == 1
        assert host.state.state == "connected"
    finally:
        await host.close()
    assert host.state.state == "closed"


async def test_unknown_host_key_refused_with_fingerprint(sshd_server, tmp_path):
    host = make_host(sshd_server, tmp_path, known=False)
    with pytest.raises(HostKeyUnknown) as info:
        await host.connect()
    fp = fingerprint(sshd_server.host_key.with_suffix(".pub"))
    assert fp in str(info.value) and "--accept-new" in str(info.value)
    assert info.value.fingerprint == fp
    assert host.state.state == "failed"
    assert not (tmp_path / "known_hosts").exists()


async def test_accept_new_adds_the_key_then_it_is_known(sshd_server, tmp_path):
    host = make_host(sshd_server, tmp_path, known=False, accept_new=True)
    await host.connect()
    await host.close()
    kh = (tmp_path / "known_hosts").read_text()
    assert kh == sshd_server.known_hosts_line()
    again = make_host(sshd_server, tmp_path, known=False)  # no --accept-new needed now
    await again.connect()
    assert (await again.run("echo ok")).stdout == "ok\n"
    await again.close()


async def test_changed_host_key_is_always_refused(sshd_server, tmp_path):
    other = keygen(tmp_path / "other_key")
    kh = tmp_path / "known_hosts"
    sshd_server.write_known_hosts(kh, key=other)
    before = kh.read_text()
    host = make_host(sshd_server, tmp_path, known=False, accept_new=True)
    with pytest.raises(HostKeyChanged) as info:
        await host.connect()
    assert "HOST KEY CHANGED" in str(info.value)
    assert fingerprint(sshd_server.host_key.with_suffix(".pub")) in str(info.value)
    assert kh.read_text() == before


async def test_changed_host_key_under_the_default_config_alias_uses_its_port(
        sshd_server, tmp_path, monkeypatch):
    """No --ssh-config: ~/.ssh/config's alias (with Port) is what connect() and the key
    lookup read; the changed key is named for [127.0.0.1]:PORT, not looked up on port 22."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    kh = tmp_path / "known_hosts"
    sshd_server.write_known_hosts(kh, key=keygen(tmp_path / "other_key"))
    sshd_server.write_client_config(home / ".ssh" / "config", kh)
    host = SshHost("testbox", reconnect_base=0.1)
    with pytest.raises(HostKeyChanged) as info:
        await host.connect()
    assert f"HOST KEY CHANGED for [127.0.0.1]:{sshd_server.port}" in str(info.value)
    assert fingerprint(sshd_server.host_key.with_suffix(".pub")) in str(info.value)


async def test_wrong_client_key_is_an_auth_error(sshd_server, tmp_path):
    stranger = keygen(tmp_path / "stranger")
    host = make_host(sshd_server, tmp_path, client_keys=[str(stranger)])
    with pytest.raises(HostAuthError, match="never asks for a password"):
        await host.connect()


async def test_proxyjump_through_the_same_sshd(sshd_server, tmp_path):
    kh = sshd_server.write_known_hosts(tmp_path / "known_hosts")
    jump = (
        "Host behind\n  HostName 127.0.0.1\n"
        f"  Port {sshd_server.port}\n  User {sshd_server.user}\n"
        f"  IdentityFile {sshd_server.client_key}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {kh}\n  ProxyJump jumpbox\n"
    )
    cfg = sshd_server.write_client_config(tmp_path / "cfg", kh, alias="jumpbox", extra=jump)
    await no_connections(sshd_server)
    host = SshHost("behind", ssh_config=cfg)
    await host.connect()
    try:
        assert (await host.run("echo via-jump")).stdout == "via-jump\n"
        assert ssh_connections(sshd_server) == 2  # the jump and the target
    finally:
        await host.close()


async def test_port_forward(sshd_server, tmp_path):
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"pong:" + await reader.readline())
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(echo, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    host = make_host(sshd_server, tmp_path)
    await host.connect()
    try:
        fwd = await host.forward_port(port)
        assert fwd.local_port != port
        reader, writer = await asyncio.open_connection("127.0.0.1", fwd.local_port)
        writer.write(b"ping\n")
        assert await reader.readline() == b"pong:ping\n"
        writer.close()
        fwd.close()
    finally:
        await host.close()
        server.close()


def append(path: Path, data: bytes) -> None:
    with open(path, "ab") as f:
        f.write(data)


async def test_tail_over_ssh_partial_truncation_rotation_bytes_huge(sshd_server, tmp_path):
    log = tmp_path / "s.log"
    log.write_bytes(b"h1\nh2\nh3\npart")
    host = make_host(sshd_server, tmp_path)
    await host.connect()
    col = Collector(LogTailer(host, [TailSpec("s", str(log))], history_lines=2))
    try:
        await col.wait_lines(2)
        assert col.texts() == ["h2", "h3"]
        await until(lambda: col.notices("history_end"), what="history_end")
        append(log, b"ial\n\x80\xff\xfe\n" + b"y" * (1 << 20) + b"z" * 5000 + b"\n")
        lines = await col.wait_lines(5)
        assert lines[2].text == "partial"
        assert lines[3].data == b"\x80\xff\xfe" and lines[3].text == "\ufffd" * 3
        assert lines[4].cut == (1 << 20) + 5000 and len(lines[4].data) == 1 << 20
        assert lines[4].end == log.stat().st_size
        with open(log, "r+b") as f:
            f.truncate(0)
        await until(lambda: col.notices("truncated"), what="truncated")
        append(log, b"t1\n")
        await col.wait_lines(6)
        os.rename(log, tmp_path / "s.log.1")
        append(tmp_path / "s.log.1", b"t2\n")
        log.write_bytes(b"r1\n")
        await col.wait_lines(8)
        assert col.texts()[5:] == ["t1", "t2", "r1"]
        assert col.notices("rotated")
    finally:
        await col.close()
        await host.close()


async def test_dropped_connection_resumes_without_loss_or_duplicates(sshd_server, tmp_path):
    log = tmp_path / "d.log"
    log.write_bytes(b"".join(b"L%04d\n" % i for i in range(200)))
    host = make_host(sshd_server, tmp_path)
    states = []
    host.add_state_listener(states.append)
    await host.connect()
    tailer = LogTailer(host, [TailSpec("d", str(log))], history_lines=None)
    col = Collector(tailer)
    try:
        await col.wait_lines(200)
        append(log, b"L0200\nL02")  # partial line in flight when the connection dies
        killed = sshd_server.drop_connections()
        assert killed
        await until(lambda: any(s.state == "reconnecting" for s in states), what="reconnecting")
        append(log, b"01\n" + b"".join(b"L%04d\n" % i for i in range(202, 300)))
        os.rename(log, tmp_path / "d.log.1")  # and a rotation while we are away
        append(tmp_path / "d.log.1", b"L0300\n")
        log.write_bytes(b"L0301\n")
        await col.wait_lines(302)
        assert col.texts() == [f"L{i:04d}" for i in range(302)]
        assert tailer.sessions >= 2
        rec = next(s for s in states if s.state == "reconnecting")
        assert rec.next_in_s is not None and rec.next_in_s > 0 and rec.retry_at is not None
        assert "reconnecting in" in rec.describe()
        assert states[-1].state == "connected"
    finally:
        await col.close()
        await host.close()


async def test_discovery_over_ssh(sshd_server, tmp_path):
    fakes = FakeServers()
    host = make_host(sshd_server, tmp_path)
    await host.connect()
    try:
        await run_discovery(host, fakes, tmp_path)
    finally:
        fakes.stop()
        await host.close()




DECODE = (b"[2025-06-01 12:00:00 TP0] Decode batch, #running-req: 1, #token: 100, "
          b"token usage: 0.01, accept len: 2.50, gen throughput (token/s): 88.80, "
          b"#queue-req: 0, \n")


async def test_record_end_to_end_over_ssh(sshd_server, tmp_path):
    host = make_host(sshd_server, tmp_path)  # writes ssh_config + known_hosts
    cfg = tmp_path / "ssh_config"
    # 1. discovery + --duration: a fake speculative server logging to a file
    fakes = FakeServers()
    slog = tmp_path / "spec.log"
    try:
        fakes.start("--port", "39871", "--speculative-algorithm", "EAGLE", log=slog,
                    msg=DECODE.decode().rstrip("\n"))
        await wait_log(slog, b"ready")
        out1 = tmp_path / "disc.jsonl"
        p1 = await asyncio.create_subprocess_exec(*record_cmd(cfg, out1, "--duration", "6"),
                                                  stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(p1.communicate(), 60)
        assert p1.returncode == 0, err.decode()
        assert b"sglang-39871" in err
        rows = [json.loads(x) for x in out1.read_text().splitlines()]
        mine = [r for r in rows if r["server"] == "sglang-39871" and "line" in r]
        assert [r["line"] for r in mine] == [DECODE.decode().rstrip("\n"), "ready"]
        # the feed's events of that server are rows too (pids; probe: a report replays them)
        assert any("pids" in r for r in rows if r["server"] == "sglang-39871")
        assert mine[0]["path"] == str(slog) and mine[0]["offset"] == 0
    finally:
        fakes.stop()
    # 2. explicit --log, live appends, clean exit on SIGTERM
    log = tmp_path / "srv.log"
    log.write_bytes(b"first\n" + DECODE)
    out2 = tmp_path / "rec.jsonl"
    p2 = subprocess.Popen(record_cmd(cfg, out2, "--log", f"srv={log}"),
                          stderr=subprocess.PIPE)
    try:
        await until(lambda: out2.exists() and out2.read_text().count("\n") >= 2, 30,
                    "first records")
        append(log, b"\xffbroken\nlast\n")
        await until(lambda: out2.read_text().count("\n") >= 4, 30, "live records")
        p2.send_signal(signal.SIGTERM)
        assert p2.wait(30) == 0
    finally:
        if p2.poll() is None:
            p2.kill()
            p2.wait()
    rows = [json.loads(x) for x in out2.read_text().splitlines()]
    assert [r["line"] for r in rows] == ["first", DECODE.decode().rstrip("\n"),
                                         "\ufffdbroken", "last"]
    assert [r["offset"] for r in rows] == [0, 6, 6 + len(DECODE), 6 + len(DECODE) + 8]
    assert all(set(r) == {"server", "path", "offset", "line", "received_at", "record", "host"}
               for r in rows)
    assert rows[0]["server"] == "srv" and rows[0]["record"] is None
    rec = rows[1]["record"]
    assert rec is not None and rec["gen_throughput"] == 88.8, rec
    await host.close()


def test_record_over_ssh_ends_without_a_stray_traceback(sshd_server, tmp_path):
    """A normal `record --duration` run over SSH ends with its summary line only: the
    teardown's tail_stop/nvml_stop, cut short as the agent's channel closes, is not left as
    asyncio's "Task exception was never retrieved ... the agent went away" (it was, in 28 of
    41 runs; three runs here)."""
    make_host(sshd_server, tmp_path)
    log = tmp_path / "srv.log"
    log.write_bytes(b"first\n" + DECODE)
    for i in range(3):
        out = tmp_path / f"o{i}.jsonl"
        res = subprocess.run(record_cmd(tmp_path / "ssh_config", out, "--log", f"srv={log}",
                                        "--duration", "2"),
                             capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stderr
        assert "Traceback" not in res.stderr and "never retrieved" not in res.stderr, res.stderr
        assert all(line.startswith("specmon record: ") for line in res.stderr.splitlines()), \
            res.stderr
        assert out.read_text().count("\n") == 2


def test_record_refuses_unknown_host_key_with_one_line(sshd_server, tmp_path):
    make_host(sshd_server, tmp_path, known=False)
    res = subprocess.run(record_cmd(tmp_path / "ssh_config", tmp_path / "o.jsonl",
                                    "--log", "x=/tmp/x"),
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2
    assert len(res.stderr.strip().splitlines()) == 1, res.stderr
    assert fingerprint(sshd_server.host_key.with_suffix(".pub")) in res.stderr
    assert "--accept-new" in res.stderr
    assert not (tmp_path / "o.jsonl").exists()


def test_record_says_a_host_without_gpus_and_one_that_never_connected(sshd_server, tmp_path):
    """Headless, a host without GPUs (or NVML) was never said (only the panel showed it), and
    a host of several that never connected was "reconnecting in 1s" once, without why, and
    missing from the end without a word."""
    import socket

    make_host(sshd_server, tmp_path)
    cfg = tmp_path / "ssh_config"
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with cfg.open("a") as f:
        f.write(f"\nHost deadbox\n  HostName 127.0.0.1\n  Port {port}\n")
    log = tmp_path / "srv.log"
    log.write_bytes(DECODE)
    out = tmp_path / "o.jsonl"
    toml = tmp_path / "specmon.toml"
    toml.write_text("".join(f'[hosts.{h}]\ntarget = "{h}"\nssh_config = "{cfg}"\n'
                            f'logs = {{ srv = "{log}" }}\n' for h in ("testbox", "deadbox")))
    res = subprocess.run([sys.executable, "-m", "specmon", "record", "--config", str(toml),
                          "--out", str(out), "--duration", "3"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    err = res.stderr.splitlines()
    assert any("deadbox: reconnecting" in x and "Connection refused)" in x for x in err), err
    assert any("deadbox: never connected during the recording" in x
               and x.endswith("nothing of it is in the file") for x in err), err
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    gpu_rows = [r for r in rows if "gpus" in r]
    said = [x for x in err if "testbox: no GPU data: " in x]
    if gpu_rows:  # a host with GPUs: nothing to say
        assert not said, err
    else:  # this machine: no NVML; said once, not once a poll
        assert len(said) == 1 and "the logs are still recorded" in said[0], err
    assert any(r.get("line", "").startswith("[2025") for r in rows)
