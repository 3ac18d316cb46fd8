"""Recorded baselines in SQLite (WAL) under the platformdirs user data dir.

Several specmon processes may record, list and delete at once: WAL mode, a busy timeout and
`BEGIN IMMEDIATE` write transactions keep every write whole; a name is unique, so recording an
existing name fails unless `replace=True` (then the old row is replaced in the same transaction).
`SPECMON_DATA_DIR` overrides the folder (tests, CI).

Reading never writes: an existing store is opened read-only (`mode=ro`; in a folder nobody may
write, where SQLite cannot make its WAL index, as `immutable`), so a read-only file or folder can
still be listed and watched against; only a write opens it for writing (and creates the store
and its table). A damaged row never fails the others: reads skip it, name it once (`warn`), and a
command that needs that very row gets `DamagedBaseline`, which says how to delete it.
"""

from __future__ import annotations

import errno
import json
import math
import os
import shlex
import sqlite3
import stat
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from specmon.analysis.drift import BaselineStats, json_kind
from specmon.analysis.fingerprint import Fingerprint, fingerprint_of
from specmon.jsonout import MAX_DEPTH, too_deep
from specmon.redact import redact_fingerprint, redact_obj, redact_text
from specmon.textsafe import visible

SCHEMA_VERSION = 1
DB_NAME = "baselines.sqlite3"


class BaselineExists(Exception):
    """A baseline with this name already exists."""


class StoreError(Exception):
    """The baseline store cannot be used: one line naming the file and the fix. Monitoring
    never depends on it: callers go on without drift watching and say so."""


class DamagedBaseline(StoreError):
    """The one baseline a command asked for is damaged: the line names the file, the row, what
    is wrong and the command that deletes it (the other baselines are untouched)."""


def _disk_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (64 << 10)


def _not_regular(path: Path) -> str | None:
    """What is at `path` when it is there and is neither a file nor a folder (a folder is
    said in the store's own words), else None."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return None
    for test, kind in ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return kind
    return None


def _unwritable_folder(path: Path) -> Path | None:
    """The folder a write to `path` needs (its parent, or the nearest one that exists when the
    parent is still to be made) when this process may not write there; None when it may."""
    folder = path.parent
    while not folder.exists() and folder.parent != folder:
        folder = folder.parent
    return None if os.access(folder, os.W_OK | os.X_OK) else folder


def _read_only_fs(folder: Path) -> str:
    try:
        return " (read-only file system)" if os.statvfs(folder).f_flag & os.ST_RDONLY else ""
    except OSError:
        return ""


_COLUMNS = "id, name, host, server, created_at, schema, data"


def store_error(path: Path, exc: BaseException, writing: bool = False) -> StoreError:
    """`exc` (sqlite3, OS) as one line: what is wrong with `path`, and the fix. `writing`: the
    failure came from a write (or from creating the store), so a folder or file this process
    may not write is the cause, whatever SQLite's words for it ("unable to open")."""
    text = str(exc) or type(exc).__name__
    low = text.lower()
    code = getattr(exc, "errno", None)
    aside = f"move it aside (mv {path} {path}.bad) and record baselines again"
    env_fix = "or set SPECMON_DATA_DIR to a writable folder"
    folder = _unwritable_folder(path)
    exists = os.path.lexists(path)
    readonly = "readonly" in low or "read-only" in low or code in (errno.EROFS, errno.EACCES,
                                                                      errno.EPERM)
    parent = path.parent
    if os.path.exists(parent) and not parent.is_dir():
        why, fix = f"{parent} is not a folder", "set SPECMON_DATA_DIR to a folder"
    elif code == errno.ELOOP or (os.path.islink(path) and not os.path.exists(path)):
        why, fix = "is a symbolic link that leads nowhere (or in a loop)", f"remove {path}"
    elif path.is_dir():
        why, fix = "is a directory, not a baseline store", "remove or rename it"
    elif "full" in low or code == errno.ENOSPC or (
            "i/o error" in low and _disk_full(path.parent)):  # SQLite in WAL mode says I/O
        why, fix = "disk full, nothing was saved", f"free space in {path.parent}"
    elif (writing or readonly) and folder is not None:
        what = "cannot be written" if exists else "cannot be created"
        why = f"{what}: folder {folder} is not writable{_read_only_fs(folder)}"
        fix = f"make {folder} writable, {env_fix}"
    elif (writing or readonly) and exists and not os.access(path, os.W_OK):
        why, fix = "cannot be written: the file is read-only", f"chmod u+w {path}, {env_fix}"
    elif writing or readonly:
        why, fix = f"cannot be written ({text})", f"make it and its folder writable, {env_fix}"
    elif exists and not os.access(path, os.R_OK):
        why, fix = "cannot be read (permission denied)", f"chmod u+r {path}, or set SPECMON_DATA_DIR"
    elif "not a database" in low or "malformed" in low:
        why, fix = f"damaged ({text})", aside
    else:
        why, fix = text, f"{aside}, or set SPECMON_DATA_DIR"
    return StoreError(f"baseline store {path}: {why}: {fix}")


def data_dir() -> Path:
    env = os.environ.get("SPECMON_DATA_DIR")
    if env:
        return Path(env)
    from platformdirs import user_data_dir

    return Path(user_data_dir("specmon", appauthor=False))


# --- reading a row: every field checked, one line saying what is wrong ---------------------------

def _brief(x: Any, width: int = 60) -> str:
    text = visible(repr(x))
    return text if len(text) <= width else text[:width - 3] + "..."


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _finite_float(text: str) -> float:
    f = float(text)
    if not math.isfinite(f):
        raise ValueError(f"{_brief(text, 30)} is not a finite number")
    return f


def load_json(text: str) -> Any:
    """A stored payload: ValueError (saying what) for invalid JSON, NaN/Infinity or a number too
    large for a float, or nesting deeper than MAX_DEPTH (never RecursionError)."""
    try:
        d = json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float)
    except RecursionError:
        raise ValueError(f"JSON nested too deeply (more than {MAX_DEPTH} levels)") from None
    except ValueError as exc:
        raise ValueError(f"not valid JSON ({exc})") from None
    if too_deep(d) is not None:
        raise ValueError(f"JSON nested too deeply (more than {MAX_DEPTH} levels)")
    return d


def _text(v: Any) -> str | None:
    """A TEXT column as str (the read connection returns bytes: a column that is not UTF-8
    must fail its row, not the whole query); None when it is not text."""
    if isinstance(v, bytes):
        try:
            return v.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return v if isinstance(v, str) else None


def _when(v: Any) -> float:
    if isinstance(v, bytes):
        v = v.decode("utf-8", "replace")
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"created_at: expected a time, got {_brief(v, 30)}")
    try:
        datetime.fromtimestamp(v)  # what list and show print
    except (OverflowError, ValueError, OSError):
        raise ValueError(f"created_at: not a time ({_brief(v, 30)})") from None
    return float(v)


@dataclass
class Baseline:
    name: str
    stats: BaselineStats
    fingerprint: Fingerprint | None = None
    host: str = "local"
    server: str = ""
    role: str | None = None  # "baseline" | "speculative"
    created_at: float = field(default_factory=time.time)
    source: dict[str, Any] = field(default_factory=dict)  # log path, line range, window
    note: str | None = None
    id: int | None = None

    @property
    def server_label(self) -> str:
        """How alerts name the server: its role when known ("baseline", "speculative")."""
        return self.role or self.server or "baseline"

    def payload(self) -> str:
        """ValueError for a non-finite number: the store never holds one (reading rejects it)."""
        return json.dumps({"stats": self.stats.to_json(),
                           "fingerprint": self.fingerprint.to_json() if self.fingerprint else None,
                           "source": self.source, "note": self.note, "role": self.role},
                          allow_nan=False)

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Baseline:
        """The row as a Baseline; ValueError saying what is wrong (one line) for any damage:
        a column that is not text or a time, JSON that is invalid, nested too deeply or holds
        NaN/Infinity, stats or a fingerprint of the wrong shape."""
        cols: dict[str, str] = {}
        for col in ("name", "host", "server", "data"):
            text = _text(row[col])
            if text is None:
                raise ValueError(f"{col}: expected text, got {_brief(row[col], 30)}")
            cols[col] = text
        created_at = _when(row["created_at"])
        d = load_json(cols["data"])
        if not isinstance(d, dict):
            raise ValueError(f"data: expected an object, got {json_kind(d)}")
        stats = BaselineStats.from_json(d.get("stats"), where="stats")
        fp = fingerprint_of(d.get("fingerprint"))
        for key in ("role", "note"):
            if d.get(key) is not None and not isinstance(d.get(key), str):
                raise ValueError(f"{key}: expected text, got {json_kind(d.get(key))}")
        source = d.get("source")
        if source is not None and not isinstance(source, dict):
            raise ValueError(f"source: expected an object, got {json_kind(source)}")
        return cls(name=cols["name"], stats=stats, fingerprint=fp, host=cols["host"],
                   server=cols["server"], role=d.get("role"), created_at=created_at,
                   source=source or {}, note=d.get("note"), id=row["id"])


@dataclass(frozen=True)
class BadRow:
    """A stored row that cannot be read: its id, its name when that is text, what is wrong."""

    id: int
    name: str | None
    why: str

    def delete_command(self) -> str:
        """The command that deletes it: by name when the name can be typed, else by row id."""
        n = self.name
        if (n and len(n) <= 200 and not n.startswith("-") and visible(n) == n
                and redact_text(n) == n):
            return f"specmon baseline delete {shlex.quote(n)}"
        return f"specmon baseline delete --id {self.id}"

    def label(self) -> str:
        return f"row {self.id}" + (f" ({_brief(redact_text(self.name))})"
                                   if self.name is not None else "")


def _why(exc: BaseException) -> str:
    """One line; redacted (it may quote stored text, and a store of an older specmon may hold
    what is now masked)."""
    text = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
    text = redact_text(" ".join(text.split()))
    return text if len(text) <= 200 else text[:197] + "..."


def _decode(row: sqlite3.Row) -> Baseline | BadRow:
    try:
        return Baseline.from_row(row)
    except Exception as exc:  # noqa: BLE001 - any damage is this row's, never the command's
        return BadRow(int(row["id"]), _text(row["name"]), _why(exc))


class BaselineStore:
    def __init__(self, path: Path | str, *, create: bool = True,
                 warn: Callable[[str], None] | None = None) -> None:
        """Opens the store; StoreError (one line: the file and the fix) when it cannot be used:
        garbage, a directory, a truncated DB, or (creating it) a folder that is not writable.

        An existing store is only read here (read-only: a read-only file or folder is fine);
        a missing one is created when `create` (a writer), else reads find nothing and nothing
        is written. `warn` gets one line for each damaged row a read skips (once per row)."""
        self.path = Path(path)
        self.warn = warn
        self.bad_rows: list[BadRow] = []  # what the last `list` skipped
        self._warned: set[int] = set()
        self._ready = False  # the schema is there and the file takes writes
        if os.path.exists(self.path.parent) and not self.path.parent.is_dir():
            raise store_error(self.path, NotADirectoryError(errno.ENOTDIR, "not a folder"))
        for p in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            kind = _not_regular(p)  # SQLite's open() of a FIFO waits for a writer, forever
            if kind is not None:
                raise StoreError(f"baseline store {self.path}: {p} is {kind}, not a file: "
                                 f"remove it, or set SPECMON_DATA_DIR")
        exists = os.path.lexists(self.path)
        try:
            if exists:
                self._check()
            elif create:
                self._create()
        except StoreError:
            raise
        except (sqlite3.Error, OSError) as exc:
            raise store_error(self.path, exc, writing=not exists) from None

    @classmethod
    def open_default(cls, *, create: bool = False,
                     warn: Callable[[str], None] | None = None) -> BaselineStore:
        """The user's store (SPECMON_DATA_DIR). Not created until a baseline is saved, unless
        `create` (a recording command: a folder that cannot take it fails before the work)."""
        return cls(data_dir() / DB_NAME, create=create, warn=warn)

    # --- connections ----------------------------------------------------------------------------

    def _create(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        db = self._connect()
        try:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS baselines ("
                " id INTEGER PRIMARY KEY AUTOINCREMENT,"
                " name TEXT NOT NULL UNIQUE,"
                " host TEXT NOT NULL,"
                " server TEXT NOT NULL,"
                " created_at REAL NOT NULL,"
                " schema INTEGER NOT NULL,"
                " data TEXT NOT NULL)")
            db.execute("CREATE INDEX IF NOT EXISTS baselines_host_server ON baselines(host, server)")
            db.execute("SELECT count(*) FROM baselines").fetchone()  # a truncated DB fails here
        finally:
            db.close()
        self._ready = True

    def _check(self) -> None:
        """A read of an existing store: a whole-file problem (garbage, truncated) fails now."""
        db = self._read()
        try:
            self._rows(db, "SELECT count(*) FROM baselines", ())
            # the columns every read uses: a table of another shape fails here, in one line
            self._rows(db, f"SELECT {_COLUMNS} FROM baselines LIMIT 0", ())
        finally:
            db.close()

    def _connect(self) -> sqlite3.Connection:
        """For writing."""
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA busy_timeout=30000")
        return db

    def _read(self) -> sqlite3.Connection:
        """A read-only connection (`mode=ro`): nothing in the store is written. In a folder
        this process may not write SQLite cannot make the WAL index (-shm), so, when no WAL
        holds writes, the file is read as `immutable` (nobody can change it there either)."""
        uri = "file:" + quote(str(self.path.absolute()))
        try:
            db = self._open_ro(uri + "?mode=ro")
        except sqlite3.OperationalError as exc:
            name = getattr(exc, "sqlite_errorname", None) or ""  # (Python 3.10 has none)
            cantopen = name == "SQLITE_CANTOPEN" or "unable to open" in str(exc)
            # on a full disk SQLite cannot size the WAL index (-shm) a reader needs: "disk
            # full" stopped `baseline list` and `check`, which write nothing
            full = (name.startswith(("SQLITE_IOERR", "SQLITE_FULL")) or "disk" in str(exc)) \
                and _disk_full(self.path.parent)
            if not (cantopen or full) or not self._may_be_immutable(full):
                raise
            db = self._open_ro(uri + "?mode=ro&immutable=1")  # each time: the folder may change
        return db

    @staticmethod
    def _open_ro(uri: str) -> sqlite3.Connection:
        db = sqlite3.connect(uri, uri=True, timeout=30.0, isolation_level=None)
        try:
            db.row_factory = sqlite3.Row
            db.text_factory = bytes  # a column that is not UTF-8 fails its row, not the query
            db.execute("PRAGMA busy_timeout=30000")
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()  # opens the file now
        except BaseException:
            db.close()
            raise
        return db

    def _may_be_immutable(self, full: bool = False) -> bool:
        if not os.path.isfile(self.path) or not os.access(self.path, os.R_OK):
            return False
        if not full and _unwritable_folder(self.path) is None:
            return False  # SQLite could make its files: the failure is something else
        try:
            pending = os.path.getsize(f"{self.path}-wal") > 0
        except OSError:
            pending = False
        if pending:
            state = "is full" if full else "is not writable"
            raise StoreError(f"baseline store {self.path}: cannot be read: its folder "
                             f"{self.path.parent} {state} and {self.path}-wal holds writes "
                             f"not yet in the file: "
                             + (f"free space in {self.path.parent}" if full else
                                "make the folder writable")
                             + " (the next reader merges them), or set SPECMON_DATA_DIR")
        return True

    @staticmethod
    def _rows(db: sqlite3.Connection, q: str, args: tuple[Any, ...] | list[Any]) -> list[Any]:
        try:
            return db.execute(q, args).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # an empty file: a store with no baselines yet
                return []
            raise

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        if not self._ready:
            self._create()  # the table, WAL (a no-op on a store that has them)
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    # --- operations ------------------------------------------------------------------------------

    def _save(self, b: Baseline, replace: bool = False) -> int:
        # the store keeps no secret, whoever saves: every text column and the payload are
        # redacted here (the lookups below redact their keys alike, so they still match)
        b.name, b.host, b.server = redact_text(b.name), redact_text(b.host), redact_text(b.server)
        b.note = redact_text(b.note) if b.note else b.note
        b.source = redact_obj(b.source)
        b.fingerprint = redact_fingerprint(b.fingerprint)
        try:
            data = b.payload()
        except ValueError:
            raise StoreError(f"baseline {b.name!r} not saved to {self.path}: its statistics hold "
                             f"a number that is not finite") from None
        with self._write() as db:
            old = db.execute("SELECT id FROM baselines WHERE name = ?", (b.name,)).fetchone()
            if old is not None:
                if not replace:
                    raise BaselineExists(b.name)
                db.execute("DELETE FROM baselines WHERE id = ?", (old["id"],))
            cur = db.execute(
                "INSERT INTO baselines (name, host, server, created_at, schema, data) VALUES (?,?,?,?,?,?)",
                (b.name, b.host, b.server, b.created_at, SCHEMA_VERSION, data))
            b.id = int(cur.lastrowid or 0)
            return b.id

    def _get(self, name: str) -> Baseline | None:
        if not os.path.lexists(self.path):
            return None
        db = self._read()
        try:
            rows = self._rows(db, "SELECT * FROM baselines WHERE name = ?", (redact_text(name),))
        finally:
            db.close()
        if not rows:
            return None
        got = _decode(rows[0])
        if isinstance(got, BadRow):
            raise DamagedBaseline(
                f"baseline store {self.path}: baseline {_brief(name)} (row {got.id}) is damaged "
                f"({got.why}): "
                f"delete it with `{got.delete_command()}` and record it again")
        return got

    def _list(self, host: str | None = None, server: str | None = None) -> list[dict[str, Any]]:
        """Rows without the samples: name, host, server, created_at and a one-line summary.
        A damaged row is left out, kept in `bad_rows` and named once through `warn`."""
        self.bad_rows = []
        if not os.path.lexists(self.path):
            return []
        q = "SELECT * FROM baselines"
        where, args = [], []
        if host is not None:
            where.append("host = ?")
            args.append(redact_text(host))
        if server is not None:
            where.append("server = ?")
            args.append(redact_text(server))
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY created_at, id"
        db = self._read()
        try:
            rows = self._rows(db, q, args)
        finally:
            db.close()
        out = []
        for row in rows:
            b = _decode(row)
            if isinstance(b, BadRow):
                self._bad(b)
                continue
            best = b.stats.best()
            out.append({"name": b.name, "host": b.host, "server": b.server, "role": b.role,
                        "created_at": b.created_at, "strata": len(b.stats.strata),
                        "n": best.n if best else 0,
                        "median": round(best.median_thr, 2) if best and best.median_thr else None,
                        "stratum": best.stratum.describe() if best else None})
        return out

    def _bad(self, bad: BadRow) -> None:
        self.bad_rows.append(bad)
        if self.warn is not None and bad.id not in self._warned:
            self._warned.add(bad.id)
            self.warn(f"baseline store {self.path}: {bad.label()} skipped, damaged ({bad.why}): "
                      f"delete it with `{bad.delete_command()}`")

    def _delete(self, name: str | None = None, row_id: int | None = None) -> bool:
        if not os.path.lexists(self.path):
            return False
        with self._write() as db:
            if row_id is not None:
                cur = db.execute("DELETE FROM baselines WHERE id = ?", (row_id,))
            else:
                cur = db.execute("DELETE FROM baselines WHERE name = ?", (redact_text(name or ""),))
            return cur.rowcount > 0

    def _guard(self, writing: bool, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except (sqlite3.Error, OSError) as exc:
            raise store_error(self.path, exc, writing) from None

    def save(self, b: Baseline, replace: bool = False) -> int:
        """Store `b` (BaselineExists when the name is taken and not `replace`); `b` becomes what
        was stored: redacted, with its row id."""
        return int(self._guard(True, self._save, b, replace))

    def get(self, name: str) -> Baseline | None:
        """None when there is no such baseline; DamagedBaseline when its row is damaged."""
        got: Baseline | None = self._guard(False, self._get, name)
        return got

    def list(self, host: str | None = None, server: str | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._guard(False, self._list, host, server)
        return rows

    def delete(self, name: str | None = None, *, row_id: int | None = None) -> bool:
        """Delete by name, or by row id (a damaged row whose name cannot be typed); the row's
        data is never read, so a damaged row goes as any other."""
        return bool(self._guard(True, self._delete, name, row_id))
