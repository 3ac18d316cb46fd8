"""Rotations faster than the agent's quiet period: every file the path named is read in turn
(even once rotated away and removed), and a file that was gone before it could be read is
reported, naming its inode, before the "rotated" event."""

from __future__ import annotations

import os

import pytest

from specmon.hostside import tail as agent


@pytest.fixture(autouse=True)
def no_quiet(monkeypatch):
    monkeypatch.setattr(agent, "ROTATE_QUIET_S", 0.0)


def drain(t: agent.Tail) -> list:
    out: list = []
    for _ in range(50):
        t.poll(out)
    return out


def texts(out: list) -> list[str]:
    return [ev[2][2] for ev in out if type(ev) is tuple]


def events(out: list, kind: str) -> list[dict]:
    return [ev for ev in out if type(ev) is dict and ev.get("ev") == kind]


def test_two_rotations_before_the_old_file_is_left_lose_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(agent, "ROTATE_QUIET_S", 3600.0)  # the old file is not left yet
    log, old = tmp_path / "rot.log", tmp_path / "rot.log.1"
    log.write_bytes(b"a1\n")
    t = agent.Tail(0, str(log))
    t.start(history=None)
    out: list = []
    t.poll(out)
    os.rename(log, old)                     # first rotation: a -> rot.log.1
    log.write_bytes(b"b1\n")
    with open(old, "ab") as f:              # the writer still appends to the old file
        f.write(b"a2\n")
    t.poll(out)                             # the tail sees the middle file once
    b_ino = log.stat().st_ino
    with open(log, "ab") as f:
        f.write(b"b2\n")
    os.rename(log, old)                     # second rotation overwrites rot.log.1: a is gone
    log.write_bytes(b"c1\n")
    with open(old, "ab") as f:
        f.write(b"b3\n")
    os.unlink(old)                          # and the middle file is removed too
    monkeypatch.setattr(agent, "ROTATE_QUIET_S", 0.0)  # now quiet long enough
    out += drain(t)
    assert texts(out) == ["a1", "a2", "b1", "b2", "b3", "c1"]
    rot = events(out, "rotated")
    assert [r["ino"] for r in rot] == [b_ino, log.stat().st_ino]
    assert not events(out, "lost")
    t.close()


def test_a_middle_file_gone_before_it_could_be_read_is_reported(tmp_path):
    """The path named something the tail could not open (here a folder; an unreadable file
    for an unprivileged agent), which is gone when the tail moves on: one "lost" event names
    it, then "rotated" to the file the path names now, whose lines are all read."""
    log = tmp_path / "rot.log"
    log.write_bytes(b"a1\n")
    t = agent.Tail(0, str(log))
    t.start(history=None)
    out: list = []
    t.poll(out)
    os.rename(log, tmp_path / "rot.log.1")
    log.mkdir()
    mid = log.stat().st_ino
    t.poll(out)
    assert events(out, "error")             # could not be opened: said once
    os.rename(log, tmp_path / "rot.log.d")  # rotated away ...
    log.write_bytes(b"c1\n")
    (tmp_path / "rot.log.d").rmdir()        # ... and removed (after c exists: no inode reuse)
    out += drain(t)
    assert texts(out) == ["a1", "c1"]
    lost, rot = events(out, "lost"), events(out, "rotated")
    assert len(lost) == 1 and lost[0]["ino"] == mid and lost[0]["off"] == 0
    assert "gone" in lost[0]["reason"] and "not read" in lost[0]["reason"]
    assert len(rot) == 1 and rot[0]["ino"] == log.stat().st_ino
    assert out.index(lost[0]) < out.index(rot[0])
    t.close()


def test_an_unreadable_newest_file_is_waited_for(tmp_path):
    """While the only file the path names cannot be opened, the old file is followed and
    nothing is reported skipped (as before)."""
    log = tmp_path / "rot.log"
    log.write_bytes(b"a1\n")
    t = agent.Tail(0, str(log))
    t.start(history=None)
    out: list = []
    t.poll(out)
    os.rename(log, tmp_path / "rot.log.1")
    log.mkdir()
    out += drain(t)
    with open(tmp_path / "rot.log.1", "ab") as f:
        f.write(b"a2\n")
    out += drain(t)
    assert texts(out) == ["a1", "a2"]
    assert not events(out, "lost") and not events(out, "rotated")
    assert len(events(out, "error")) == 1
    t.close()
