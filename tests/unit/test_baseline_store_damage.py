"""The baseline store on bad data: a damaged row, a read-only file or folder, a folder that
cannot take a new store. Each case is one line naming the file (and the row), never a
traceback, and loses nothing: good rows are still listed, shown and watched against, reads
never write, and the damaged row can be deleted by the command the message gives.

Driven through the real CLI entry (`specmon.cli.main`) in-process, and through the drift
lookup that `record` and `connect` use (`commands.hostargs.default_baselines`).
"""

from __future__ import annotations

import array
import fcntl
import json
import math
import os
import random
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from specmon.analysis.drift import BaselineStats
from specmon.cli import main
from specmon.commands.hostargs import default_baselines
from specmon.session.baselines import DB_NAME, BaselineStore

pytestmark = pytest.mark.unit


def _log(path: Path, n: int = 70, level: float = 88.8, seed: int = 1) -> str:
    rng = random.Random(seed)
    out = ["[2026-05-01 10:00:00] server_args=ServerArgs(model_path='m', tp_size=8, port=30000)"]
    for i in range(n):
        s = 2 * i
        thr = level * math.exp(rng.gauss(0, 0.01))
        out.append(f"[2026-05-01 10:{s // 60:02d}:{s % 60:02d}] Decode batch, #running-req: 1, "
                   f"#token: 1500, token usage: 0.01, cuda graph: True, "
                   f"gen throughput (token/s): {thr:.2f}, #queue-req: 0")
    path.write_text("\n".join(out) + "\n")
    return str(path)


@pytest.fixture()
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> Path:
    """A store with good1, bad, good2 (in that order) for host local, server s1."""
    data = tmp_path / "data"
    monkeypatch.setenv("SPECMON_DATA_DIR", str(data))
    log = _log(tmp_path / "b.log")
    for name in ("good1", "bad", "good2"):
        assert main(["baseline", "record", name, "--log", log, "--server", "s1"]) == 0
    capsys.readouterr()
    return data / DB_NAME


def _set(db: Path, which: str, **cols: Any) -> int:
    con = sqlite3.connect(db)
    try:
        row_id = con.execute("SELECT id FROM baselines WHERE name = ?", (which,)).fetchone()[0]
        for col, value in cols.items():
            con.execute(f"UPDATE baselines SET {col} = ? WHERE id = ?", (value, row_id))
        con.commit()
    finally:
        con.close()
    return int(row_id)


def _payload(db: Path, name: str) -> dict[str, Any]:
    con = sqlite3.connect(db)
    try:
        d: dict[str, Any] = json.loads(
            con.execute("SELECT data FROM baselines WHERE name = ?", (name,)).fetchone()[0])
    finally:
        con.close()
    return d


def _edit(edit: Callable[[dict[str, Any]], Any]) -> Callable[[Path], dict[str, Any]]:
    def damage(db: Path) -> dict[str, Any]:
        d = _payload(db, "bad")
        edit(d)
        return {"data": json.dumps(d)}  # allow_nan: NaN and Infinity are written as such
    return damage


def _y0(value: Any) -> Callable[[dict[str, Any]], Any]:
    return lambda d: d["stats"]["strata"][0]["y"].__setitem__(0, value)


def _deep_server_args(d: dict[str, Any]) -> None:
    deep: Any = 1
    for _ in range(500):  # under the recursion limit for json.loads, but not for redaction
        deep = {"a": deep}
    d["fingerprint"] = {"server_args": {"x": deep}}


# (id, how the row is damaged, what the one line must say)
DAMAGE: list[tuple[str, Callable[[Path], dict[str, Any]], str]] = [
    ("deep-json", lambda db: {"data": "[" * 100000}, "nested too deeply"),
    ("deep-fingerprint", _edit(_deep_server_args), "nested too deeply"),
    ("stats-null", _edit(lambda d: d.__setitem__("stats", None)), "stats: expected an object, got null"),
    ("created-at-text", lambda db: {"created_at": "abc"}, "created_at"),
    ("nan", _edit(_y0(float("nan"))), "NaN is not a finite number"),
    ("infinity", _edit(_y0(float("inf"))), "Infinity is not a finite number"),
    ("overflow", lambda db: {"data": json.dumps(_payload(db, "bad")).replace(
        '"y": [', '"y": [1e999, ', 1)}, "not a finite number"),
    ("not-json", lambda db: {"data": "{not json"}, "not valid JSON"),
    ("not-an-object", lambda db: {"data": "[1, 2]"}, "data: expected an object, got a list"),
    ("data-not-utf8", lambda db: {"data": b"\xff\xfe"}, "data: expected text"),
    ("stratum-key", _edit(lambda d: d["stats"]["strata"][0].__setitem__("stratum", "x|y")),
     "not a stratum key"),
    ("ctx-huge", _edit(lambda d: d["stats"]["strata"][0].__setitem__("stratum", "1|99|0|1")),
     "out of range"),
    ("y-string", _edit(_y0("fast")), "stats.strata[0].y[0]: expected a number, got a string"),
    ("fingerprint-shape", _edit(lambda d: d.__setitem__("fingerprint", {"tp_size": "eight"})),
     "fingerprint.tp_size"),
    ("fingerprint-gpu", _edit(lambda d: d.__setitem__("fingerprint", {"gpus": [{"idx": 0}]})),
     "fingerprint"),
]


@pytest.mark.parametrize("damage,said", [d[1:] for d in DAMAGE], ids=[d[0] for d in DAMAGE])
def test_a_damaged_row_is_named_once_skipped_and_deletable(store, capsys, damage, said):
    row = _set(store, "bad", **damage(store))
    # list: the good rows, one stderr line for the bad one (file, row, name, what, the fix)
    assert main(["baseline", "list"]) == 0
    out, err = capsys.readouterr()
    assert [ln.split("\t")[0] for ln in out.splitlines()] == ["good1", "good2"]
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert str(store) in lines[0] and f"row {row}" in lines[0] and "'bad'" in lines[0], err
    assert said in lines[0] and "`specmon baseline delete bad`" in lines[0], err
    assert "move it aside" not in err
    assert main(["baseline", "list", "--json"]) == 0
    out, err = capsys.readouterr()
    assert [r["name"] for r in json.loads(out)] == ["good1", "good2"] and len(err.splitlines()) == 1
    # show of the damaged one: it is damaged, and how to delete it; the good ones still show
    assert main(["baseline", "show", "bad"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert str(store) in err and "damaged" in err and said in err
    assert "specmon baseline delete bad" in err and "move it aside" not in err
    for good in ("good1", "good2"):
        assert main(["baseline", "show", good, "--json"]) == 0
        assert json.loads(capsys.readouterr().out)["name"] == good
    # the drift lookup of record/connect: the newest good baseline of that server
    told: list[str] = []
    lookup = default_baselines(told.append)
    got = lookup("local", "s1", None)
    assert got is not None and got.name == "good2"
    lookup("local", "s1", None)  # record and connect say a skipped row once, as list does
    assert len(told) == 1 and f"row {row}" in told[0] and said in told[0], told
    # the advised command deletes it; nothing else is lost
    assert main(["baseline", "delete", "bad"]) == 0
    capsys.readouterr()
    assert main(["baseline", "list"]) == 0
    out, err = capsys.readouterr()
    assert [ln.split("\t")[0] for ln in out.splitlines()] == ["good1", "good2"] and err == ""


def test_the_newest_row_damaged_falls_back_to_the_newest_good_one(store, capsys):
    _set(store, "good2", data='{"stats": null}')
    said: list[str] = []
    lookup = default_baselines(said.append)
    got = lookup("local", "s1", None)
    assert got is not None and got.name == "bad"  # "bad" is a good row here
    assert len(said) == 1 and "'good2'" in said[0] and "skipped, damaged" in said[0], said
    assert got.stats.best() is not None and got.stats.best().n == 65


def test_each_bad_row_is_named_once_however_often_it_is_read(store):
    _set(store, "bad", data='{"stats": null}')
    _set(store, "good1", created_at="abc")
    warned: list[str] = []
    st = BaselineStore(store, warn=warned.append)
    for _ in range(3):  # the drift lookup lists once per server
        assert [r["name"] for r in st.list()] == ["good2"]
        assert {b.name for b in st.bad_rows} == {"bad", "good1"}
    assert len(warned) == 2 and all(str(store) in w for w in warned)


def test_a_row_whose_name_cannot_be_typed_is_deleted_by_row_id(store, capsys):
    row = _set(store, "bad", name=b"\xff\x1b[31m", data="{}")
    assert main(["baseline", "list"]) == 0
    out, err = capsys.readouterr()
    assert [ln.split("\t")[0] for ln in out.splitlines()] == ["good1", "good2"]
    assert len(err.strip().splitlines()) == 1 and "\x1b" not in err
    assert f"`specmon baseline delete --id {row}`" in err
    assert main(["baseline", "delete", "--id", str(row)]) == 0
    assert capsys.readouterr().out.strip() == f"deleted row {row}"
    assert main(["baseline", "list"]) == 0
    assert capsys.readouterr().err == ""
    assert main(["baseline", "delete"]) == 2
    assert "NAME or --id" in capsys.readouterr().err


@pytest.mark.parametrize("bad", [None, [], "x", {"strata": None}, {"strata": [None]},
                                 {"strata": [{"stratum": "1||0|1", "y": [math.nan], "thr": [1.0]}]},
                                 {"strata": [{"stratum": "1||0|1", "y": [1.0], "thr": [math.inf]}]},
                                 {"strata": [{"stratum": "1||0|1", "y": [1.0, 2.0], "thr": [1.0]}]},
                                 {"strata": [{"stratum": "1||0|1", "y": [1e300], "thr": [1.0]}]},
                                 {"strata": [{"stratum": "1||0|1", "y": [1.0], "thr": [1.0],
                                              "rr": [10 ** 400]}]},
                                 {"strata": [], "excluded": {"warmup": -1}}])
def test_baseline_stats_from_json_says_what_is_wrong_as_value_error(bad):
    with pytest.raises(ValueError, match=r"^stats"):
        BaselineStats.from_json(bad)


# --- read-only: reads open the store with mode=ro, only writes need write access ---------------

FS_IOC_GETFLAGS, FS_IOC_SETFLAGS, FS_IMMUTABLE_FL = 0x80086601, 0x40086602, 0x10


def _immutable(path: Path, on: bool) -> bool:
    """chattr +i / -i (root too cannot write an immutable file or folder); False where the file
    system or the capabilities do not allow it."""
    try:
        fd = os.open(path, os.O_RDONLY | (os.O_DIRECTORY if path.is_dir() else 0))
    except OSError:
        return False
    try:
        flags = array.array("i", [0])
        fcntl.ioctl(fd, FS_IOC_GETFLAGS, flags, True)
        flags[0] = flags[0] | FS_IMMUTABLE_FL if on else flags[0] & ~FS_IMMUTABLE_FL
        fcntl.ioctl(fd, FS_IOC_SETFLAGS, flags, True)
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def _writable(path: Path) -> bool:
    probe = (path if path.is_dir() else path.parent) / ".probe"
    try:
        if path.is_dir():
            probe.write_bytes(b"")
            probe.unlink()
        else:
            with open(path, "r+b"):
                pass
        return True
    except OSError:
        return False


@contextmanager
def read_only(path: Path) -> Iterator[bool]:
    """`path` (a file or a folder) read-only, for root too where possible: chmod, and where
    this process may still write (root), the immutable flag. Yields whether it really is."""
    mode = path.stat().st_mode & 0o7777
    os.chmod(path, 0o555 if path.is_dir() else 0o444)
    flagged = _writable(path) and _immutable(path, True)
    try:
        yield not _writable(path)
    finally:
        if flagged:
            _immutable(path, False)
        os.chmod(path, mode)


@contextmanager
def connects() -> Iterator[list[str]]:
    """Every sqlite3.connect target while the block runs (str of the path or URI)."""
    seen: list[str] = []
    real = sqlite3.connect

    def spy(target: Any, *a: Any, **kw: Any) -> sqlite3.Connection:
        seen.append(f"{target}{' uri' if kw.get('uri') else ''}")
        return real(target, *a, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sqlite3, "connect", spy)
        yield seen


def _reads(capsys: pytest.CaptureFixture[str]) -> None:
    """list, show, the drift lookup: all succeed and print no error."""
    assert main(["baseline", "list"]) == 0
    out, err = capsys.readouterr()
    assert [ln.split("\t")[0] for ln in out.splitlines()] == ["good1", "bad", "good2"] and err == ""
    assert main(["baseline", "show", "good1"]) == 0
    assert capsys.readouterr().out.startswith("good1: local/s1")
    lookup = default_baselines(lambda line: pytest.fail(f"said {line!r}"))
    got = lookup("local", "s1", None)
    assert got is not None and got.name == "good2"


def test_reads_open_the_store_read_only_and_never_change_it(store, capsys):
    assert not Path(f"{store}-wal").exists()  # the writer closed: everything is in the file
    before, mtime = store.read_bytes(), store.stat().st_mtime_ns
    with connects() as seen:
        _reads(capsys)
    assert seen and all(s.endswith("mode=ro uri") for s in seen), seen
    assert store.read_bytes() == before and store.stat().st_mtime_ns == mtime
    wal = Path(f"{store}-wal")  # SQLite's WAL reader may make an empty one; nothing is in it
    assert not wal.exists() or wal.stat().st_size == 0


def test_a_read_only_folder_is_read_and_a_write_says_which_folder(store, tmp_path, capsys):
    log = _log(tmp_path / "c.log", seed=2)
    with read_only(store.parent) as ro:
        with connects() as seen:
            _reads(capsys)
        assert all("mode=ro" in s for s in seen), seen
        assert main(["baseline", "record", "new", "--log", log]) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and str(store) in err[0] and "Traceback" not in err[0]
        if ro:  # where the folder really is read-only (always unless root lacks the capability)
            assert f"folder {store.parent} is not writable" in err[0], err
            assert "SPECMON_DATA_DIR" in err[0] and "move it aside" not in err[0]
            assert main(["baseline", "delete", "good1"]) == 2
            err = capsys.readouterr().err.strip().splitlines()
            assert len(err) == 1 and f"folder {store.parent} is not writable" in err[0]
    assert main(["baseline", "list"]) == 0  # nothing was lost
    assert len(capsys.readouterr().out.splitlines()) == (3 if ro else 4)


def test_a_read_only_file_is_read_and_a_write_says_the_file_is_read_only(store, tmp_path, capsys):
    log = _log(tmp_path / "c.log", seed=2)
    with read_only(store) as ro:
        _reads(capsys)
        rc = main(["baseline", "record", "new", "--log", log])
        err = capsys.readouterr().err.strip().splitlines()
        if ro:
            assert rc == 2 and len(err) == 1 and str(store) in err[0], err
            assert "the file is read-only" in err[0] and "SPECMON_DATA_DIR" in err[0], err
        else:
            assert rc == 0
    assert main(["baseline", "show", "good1"]) == 0


def test_an_unwritable_folder_without_a_store_says_so_and_reads_find_nothing(tmp_path, monkeypatch,
                                                                            capsys):
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("SPECMON_DATA_DIR", str(data))
    log = _log(tmp_path / "b.log")
    with read_only(data) as ro:
        assert main(["baseline", "list"]) == 0  # nothing recorded; nothing created either
        out, err = capsys.readouterr()
        assert out.strip() == "no baselines recorded" and err == ""
        assert main(["baseline", "show", "x"]) == 2
        assert "no baseline named 'x'" in capsys.readouterr().err
        assert default_baselines(lambda line: pytest.fail(line)) is None
        rc = main(["baseline", "record", "b", "--log", log])
        err = capsys.readouterr().err.strip().splitlines()
        if ro:
            assert rc == 2 and len(err) == 1, err
            assert str(data / DB_NAME) in err[0] and f"folder {data} is not writable" in err[0]
            assert "cannot be created" in err[0] and "move it aside" not in err[0]
            assert not (data / DB_NAME).exists()
        # a folder still to be made under it names the folder that stops it
        monkeypatch.setenv("SPECMON_DATA_DIR", str(data / "sub"))
        rc = main(["baseline", "record", "b", "--log", log])
        err = capsys.readouterr().err.strip().splitlines()
        if ro:
            assert rc == 2 and len(err) == 1 and f"folder {data} is not writable" in err[0], err


def test_record_replace_overwrites_a_damaged_row(store, tmp_path, capsys):
    _set(store, "bad", data="[" * 100000)
    log = _log(tmp_path / "c.log", seed=3)
    assert main(["baseline", "record", "bad", "--log", log, "--server", "s1"]) == 2
    assert "exists (use --replace)" in capsys.readouterr().err
    assert main(["baseline", "record", "bad", "--log", log, "--server", "s1", "--replace"]) == 0
    capsys.readouterr()
    assert main(["baseline", "list"]) == 0
    out, err = capsys.readouterr()
    assert [ln.split("\t")[0] for ln in out.splitlines()] == ["good1", "good2", "bad"] and err == ""


@pytest.mark.parametrize("make,said", [
    (lambda d: sqlite3.connect(d / "baselines.sqlite3").execute("CREATE TABLE baselines(x)"),
     "no such column"),
    (lambda d: (d / "baselines.sqlite3").symlink_to("baselines.sqlite3"),
     "is a symbolic link that leads nowhere (or in a loop)"),
    (None, "is not a folder: set SPECMON_DATA_DIR to a folder"),
], ids=["table-of-another-shape", "symlink-loop", "data-dir-is-a-file"])
def test_a_store_of_another_shape_is_said_by_record_and_list_never_silent(
        tmp_path, monkeypatch, capsys, make, said):
    """record's drift lookup turned these off without a word (a table of another shape failed
    only inside the lookup, whose errors it swallowed; a file as SPECMON_DATA_DIR looked like
    no store at all); a link loop was told to chmod u+r."""
    d = tmp_path / "data"
    if make is None:
        d.write_text("a file, not a folder\n")
    else:
        d.mkdir()
        db = make(d)
        if isinstance(db, sqlite3.Connection):
            db.commit()
            db.close()
    monkeypatch.setenv("SPECMON_DATA_DIR", str(d))
    told: list[str] = []
    assert default_baselines(told.append) is None
    assert len(told) == 1 and said in told[0] and "drift watching is off" in told[0], told
    assert main(["baseline", "list"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and said in err and "Traceback" not in err, err
