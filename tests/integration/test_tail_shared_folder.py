"""A log in a folder other users may write to (issue 22): after a rotation, what another user
puts at the log's name is not followed. A FIFO there used to block the agent's one loop in
open() (every tail of the host stopped); another user's regular file was read as the server's
log. Through the real agent (LocalHost, the SSH code path)."""

from __future__ import annotations

import base64
import hashlib
import os
import threading

from kit.tail import Collector
from kit.wait import until

from specmon.hostside.procs import modified_files
from specmon.sources.tail import LogTailer, TailSpec

OTHER_UID = 65534  # nobody: the other user (the tests run as root, which may chown to it)


async def test_a_fifo_then_another_users_file_at_the_log_name_are_not_followed(host, tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    log, rotated, other = shared / "s.log", shared / "s.log.1", tmp_path / "other.log"
    log.write_bytes(b"line 0\n")
    other.write_bytes(b"other 0\n")
    col = Collector(LogTailer(host, [TailSpec("s", str(log)), TailSpec("o", str(other))],
                              history_lines=None))
    try:
        await col.wait_lines(2)
        os.rename(log, rotated)
        os.mkfifo(log)  # the other user's FIFO where the log was
        await until(lambda: col.notices("error"), what="the FIFO named")
        assert "not a regular file (a FIFO)" in col.notices("error")[0].detail["error"]
        with open(rotated, "ab") as f:  # the writer still appends to the old inode
            f.write(b"line 1\n")
        with open(other, "ab") as f:  # and the agent still serves its other tails
            f.write(b"other 1\n")
        await col.wait_lines(4)
        assert sorted(col.texts()) == ["line 0", "line 1", "other 0", "other 1"]

        # each new file is made aside and renamed over the one before
        forged = shared / "forged"
        forged.write_bytes(b"FORGED accept len: 9.99\n")
        if os.geteuid() == 0:
            os.chown(forged, OTHER_UID, OTHER_UID)
            os.rename(forged, log)
            await until(lambda: any(f"owned by uid {OTHER_UID}" in n.detail["error"]
                                    for n in col.notices("error")), what="the owner named")
        ours = shared / "ours"
        ours.write_bytes(b"line 2\n")  # the server's own new log
        os.rename(ours, log)
        await until(lambda: "line 2" in col.texts() or col.error, timeout=20, what="line 2")
        assert col.texts("s") == ["line 0", "line 1", "line 2"]
        assert "FORGED accept len: 9.99" not in col.texts()
    finally:
        await col.close()


async def test_a_link_another_user_puts_at_the_log_name_is_not_followed(host, tmp_path):
    """Issue 22's probe: after a rotation, mallory put `s.log -> ~alice/private.txt` in the
    shared folder; the tail followed the link (the owner check read the target: alice's own
    file) and recorded alice's private lines. A link of hers, or a folder on the way that she
    swapped for one, is not followed; the user's own link is (a `current.log`)."""
    assert os.geteuid() == 0, "the tests run as root (they chown files to another user)"
    shared = tmp_path / "shared"
    (shared / "grp").mkdir(parents=True)
    os.chmod(shared, 0o777)  # not sticky: anyone may rename what is in it
    os.chmod(shared / "grp", 0o777)
    private = tmp_path / "home"
    private.mkdir()
    (private / "private.txt").write_bytes(b"PRIVATE 1\n")
    (private / "s.log").write_bytes(b"PRIVATE 2\n")
    log = shared / "grp" / "s.log"
    log.write_bytes(b"line 0\n")
    col = Collector(LogTailer(host, [TailSpec("s", str(log))], history_lines=None))
    try:
        await col.wait_lines(1)
        os.rename(log, shared / "grp" / "s.log.1")
        # mallory's link, made aside and renamed in (a link made in place and then chowned is
        # root's own link for a moment, which the tail rightly follows if it looks then)
        aside = shared / "grp" / "aside"
        os.symlink(private / "private.txt", aside)
        os.lchown(aside, OTHER_UID, OTHER_UID)
        os.rename(aside, log)
        await until(lambda: any(f"a link made by uid {OTHER_UID}" in n.detail["error"]
                                for n in col.notices("error")), what="the link refused")
        os.unlink(log)
        # a folder on the way swapped for a link into the user's private folder
        os.rename(shared / "grp", shared / "grp.old")
        os.symlink(private, shared / "aside")
        os.lchown(shared / "aside", OTHER_UID, OTHER_UID)
        os.rename(shared / "aside", shared / "grp")
        await until(lambda: any("leads out of the log's folder" in n.detail["error"]
                                for n in col.notices("error")), what="the folder refused")
        os.unlink(shared / "grp")
        os.rename(shared / "grp.old", shared / "grp")
        (shared / "grp" / "run2.log").write_bytes(b"line 1\n")
        os.symlink(shared / "grp" / "run2.log", log)  # the user's own link: followed
        await until(lambda: "line 1" in col.texts() or col.error, timeout=20, what="line 1")
        assert col.texts("s") == ["line 0", "line 1"]
        assert not any("PRIVATE" in t for t in col.texts())
    finally:
        await col.close()


def test_the_probe_hashes_only_regular_files(tmp_path):
    """A RECORD entry that is a FIFO or /dev/zero is named unreadable, at once (the probe's
    plain open() of a FIFO blocked the agent; /dev/zero was read until memory ran out)."""
    site = tmp_path / "site"
    info = site / "sglang-9.9.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sglang\nVersion: 9.9\n")
    os.mkfifo(site / "hang.py")
    os.symlink("/dev/zero", site / "zero.py")
    (site / "ok.py").write_text("x = 1\n")
    ok = base64.urlsafe_b64encode(hashlib.sha256(b"x = 1\n").digest()).rstrip(b"=").decode()
    (info / "RECORD").write_text(
        f"hang.py,sha256=AAAA,1\nzero.py,sha256=AAAA,1\nok.py,sha256={ok},6\n")
    got: list[tuple[object, ...]] = []
    probe = threading.Thread(target=lambda: got.append(modified_files("sglang", [str(site)])))
    probe.start()
    probe.join(20)
    if probe.is_alive():  # blocked in open(): let it go (a writer opens and closes), then fail
        os.close(os.open(site / "hang.py", os.O_WRONLY | os.O_NONBLOCK))
        probe.join(20)
        raise AssertionError("the probe blocked on a FIFO")
    version, method, files = got[0]
    assert (version, method) == ("9.9", "RECORD")
    assert files == ["hang.py (unreadable: not a regular file (a FIFO))",
                     "zero.py (unreadable: not a regular file (a character device))"]
