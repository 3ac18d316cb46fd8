"""Tails over the real sshd in a hostile world (issue 16): copytruncate while disconnected,
rotation to a file the agent may not read."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from kit import sshd
from kit.ssh_faults import session_process
from kit.ssh_host import make_host
from kit.tail import Collector
from kit.wait import until

from specmon.hosts.base import ConnectionState
from specmon.sources.tail import LogTailer, TailSpec

sshd_server = sshd.sshd_server


def lines(prefix: str, a: int, b: int) -> bytes:
    return b"".join(b"%s %04d of the server's log, long enough to matter\n" % (prefix.encode(), i)
                    for i in range(a, b))


async def test_copytruncate_while_disconnected_reads_from_start_and_says_what_was_missed(
        sshd_server, tmp_path):
    log = tmp_path / "c.log"
    log.write_bytes(lines("old", 0, 20))
    host = make_host(sshd_server, tmp_path, reconnect_base=0.3, reconnect_max=0.5,
                     python=sys.executable)
    missed = lines("old", 20, 25)
    done: list[int] = []

    def while_away(st: ConnectionState) -> None:
        # runs the moment the host notices the drop, before any reconnect attempt
        if st.state == "reconnecting" and not done:
            with open(log, "ab") as f:
                f.write(missed)  # written after we stopped reading ...
            shutil.copyfile(log, tmp_path / "c.log.1")  # ... then logrotate's copytruncate
            with open(log, "r+b") as f:
                f.truncate(0)
            log.write_bytes(lines("new", 0, 40))  # regrows past the old offset
            done.append(1)

    host.add_state_listener(while_away)
    await host.connect()
    tailer = LogTailer(host, [TailSpec("c", str(log))], history_lines=None)
    col = Collector(tailer)
    try:
        await col.wait_lines(20)
        pid = tailer._client.pid if tailer._client else None
        assert pid is not None
        os.kill(session_process(sshd_server, pid), signal.SIGKILL)
        await col.wait_lines(60)
        texts = col.texts()
        # nothing mid-line, nothing of the old content repeated: the new file from its start
        assert texts[:20] == [t.decode().rstrip("\n") for t in lines("old", 0, 20).splitlines(True)]
        assert texts[20:] == [t.decode().rstrip("\n") for t in lines("new", 0, 40).splitlines(True)]
        trunc = col.notices("truncated")
        assert len(trunc) == 1 and trunc[0].detail["while_disconnected"] is True
        assert trunc[0].detail["message"] == (
            f"truncated while disconnected; up to {len(missed)} bytes not seen "
            f"(they are in {tmp_path / 'c.log.1'})")
        assert col.lines[20].offset == 0
        # the gap is on the first line read after it (record writes it: "lost"), not only in a
        # notice: a reader of the recording alone saw none
        assert col.lines[20].lost == len(missed) and not any(x.lost for x in col.lines[21:])
        from specmon.commands.record import line_json
        assert json.loads(line_json(col.lines[20], None))["lost"] == len(missed)
        assert "lost" not in json.loads(line_json(col.lines[21], None))
        # no "resumed at the exact byte" before it: the resume was no exact one (it said so
        # first, then the truncation)
        assert not col.notices("resumed"), col.notices("resumed")
        from specmon.feeds.common import notice_text
        assert notice_text(trunc[0]) == ("log truncated: reading from the start again: "
                                         + trunc[0].detail["message"])  # (no key=value dump)
    finally:
        await col.close()
        await host.close()


def unprivileged_python(tmp_path: Path) -> str:
    """The agent's interpreter, as a user that cannot read a 0600 root file (we may be root:
    then drop to nobody with setpriv; otherwise mode 000 already denies us)."""
    if os.geteuid() != 0:
        return sys.executable
    wrapper = tmp_path / "python-nobody"
    wrapper.write_text("#!/bin/sh\nexec setpriv --reuid=65534 --regid=65534 --clear-groups "
                       '/usr/bin/python3 "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper)


async def test_rotation_to_an_unreadable_file_is_permission_denied_and_the_old_file_is_finished(
        sshd_server, tmp_path):
    with tempfile.TemporaryDirectory() as d:  # a folder the unprivileged agent can enter
        os.chmod(d, 0o755)
        log = Path(d) / "r.log"
        log.write_bytes(b"a1\na2\n")
        log.chmod(0o644)
        host = make_host(sshd_server, tmp_path, python=unprivileged_python(tmp_path))
        await host.connect()
        col = Collector(LogTailer(host, [TailSpec("r", str(log))], history_lines=None))
        try:
            await col.wait_lines(2)
            # Rotate without a moment where the path is missing (that moment would rightly be
            # reported): the old inode gets its new name first, then the new file replaces the
            # path in one rename.
            new = Path(d) / "r.log.new"
            fd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if os.geteuid() == 0
                         else 0o000)
            os.write(fd, b"b1\n")
            os.close(fd)
            os.link(log, Path(d) / "r.log.1")
            os.rename(new, log)
            with open(Path(d) / "r.log.1", "ab") as f:
                f.write(b"a3 written to the old file after the rename\n")
            await until(lambda: col.notices("error"), what="the permission error")
            await col.wait_lines(3)
            assert col.texts() == ["a1", "a2", "a3 written to the old file after the rename"]
            err = col.notices("error")[0].detail
            assert "Permission denied" in err["error"] and err.get("denied") is True
            assert not col.notices("missing") and not col.notices("rotated")
            log.chmod(0o644)  # readable now: the rotation completes
            await col.wait_lines(4)
            assert col.texts()[3] == "b1" and len(col.notices("rotated")) == 1
        finally:
            await col.close()
            await host.close()


async def test_rotation_to_an_unreadable_file_reads_the_old_inode_to_its_end_20_runs(
        sshd_server, tmp_path):
    """20 files (20 runs at once, one agent): each is rotated to a file the agent may not read
    while its writer goes on appending to the old inode; the new file becomes readable halfway
    through those appends. Every line written to the old inode arrives (0 lost in each of the
    20), then the new file's; moving to the new file as soon as it could be opened lost the
    old file's later lines."""
    import threading
    import time

    n_files, before, after = 20, 200, 400
    with tempfile.TemporaryDirectory() as d:  # a folder the unprivileged agent can enter
        os.chmod(d, 0o755)
        logs = [Path(d) / f"r{i}.log" for i in range(n_files)]
        fds = []
        for log in logs:
            fds.append(os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644))
            os.chmod(log, 0o644)
        host = make_host(sshd_server, tmp_path, python=unprivileged_python(tmp_path))
        await host.connect()
        col = Collector(LogTailer(host, [TailSpec(f"r{i}", str(p)) for i, p in enumerate(logs)],
                                  history_lines=None))

        def writer(i: int) -> None:
            log, fd = logs[i], fds[i]
            for k in range(before):
                os.write(fd, b"old %04d before the rotation\n" % k)
            new = log.with_suffix(".new")
            nfd = os.open(new, os.O_WRONLY | os.O_CREAT | os.O_EXCL,
                          0o600 if os.geteuid() == 0 else 0o000)
            os.write(nfd, b"new 0000\n")
            os.close(nfd)
            os.link(log, log.with_suffix(".log.1"))
            os.rename(new, log)  # the path now names a file the agent may not read
            for k in range(before, before + after):
                os.write(fd, b"old %04d after the rotation\n" % k)
                if k == before + after // 2:
                    os.chmod(log, 0o644)  # readable now: the tail may move on
                if k % 20 == 0:
                    time.sleep(0.003)
            os.close(fd)

        try:
            await until(lambda: len(col.notices("opened")) == n_files, what="20 tails open")
            threads = [threading.Thread(target=writer, args=(i,)) for i in range(n_files)]
            for t in threads:
                t.start()
            for t in threads:
                await asyncio.to_thread(t.join)
            await col.wait_lines(n_files * (before + after + 1), timeout=60)
            lost = []
            for i in range(n_files):
                texts = col.texts(f"r{i}")
                olds = [t for t in texts if t.startswith("old ")]
                lost.append(before + after - len(olds))
                assert texts[-1] == "new 0000", texts[-3:]  # the new file after all the old
            assert lost == [0] * n_files
            assert len(col.notices("rotated")) == n_files
        finally:
            await col.close()
            await host.close()
