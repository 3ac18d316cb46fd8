"""Recorded baselines in SQLite (WAL) under the platformdirs user data dir.

Several specmon processes may record, list and delete at once: WAL mode, a busy timeout and
`BEGIN IMMEDIATE` write transactions keep every write whole; a name is unique, so recording an
existing name fails unless `replace=True` (then the old row is replaced in the same transaction).
`SPECMON_DATA_DIR` overrides the folder (tests, CI).
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from specmon.analysis.drift import BaselineStats
from specmon.analysis.fingerprint import Fingerprint

SCHEMA_VERSION = 1
DB_NAME = "baselines.sqlite3"


class BaselineExists(Exception):
    """A baseline with this name already exists."""


class StoreError(Exception):
    """The baseline store cannot be used: one line naming the file and the fix. Monitoring
    never depends on it: callers go on without drift watching and say so."""


def _disk_full(folder: Path) -> bool:
    try:
        st = os.statvfs(folder)
    except OSError:
        return False
    return st.f_bavail * st.f_frsize < (64 << 10)


def store_error(path: Path, exc: BaseException) -> StoreError:
    """`exc` (sqlite3, OS, a damaged row) as one line: what is wrong with `path`, and the fix."""
    text = str(exc) or type(exc).__name__
    low = text.lower()
    aside = f"move it aside (mv {path} {path}.bad) and record baselines again"
    if path.is_dir():
        why, fix = "is a directory, not a baseline store", "remove or rename it"
    elif "full" in low or getattr(exc, "errno", None) == errno.ENOSPC or (
            "i/o error" in low and _disk_full(path.parent)):  # SQLite in WAL mode says I/O
        why, fix = "disk full, nothing was saved", f"free space in {path.parent}"
    elif "readonly" in low or "read-only" in low or getattr(exc, "errno", None) in (
            errno.EROFS, errno.EACCES, errno.EPERM):
        why, fix = f"cannot be written ({text})", (
            "make it and its folder writable, or set SPECMON_DATA_DIR to a writable folder")
    elif "not a database" in low or "malformed" in low or isinstance(exc, ValueError | KeyError):
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
        return json.dumps({"stats": self.stats.to_json(),
                           "fingerprint": self.fingerprint.to_json() if self.fingerprint else None,
                           "source": self.source, "note": self.note, "role": self.role})

    @classmethod
    def from_row(cls, row: sqlite3.Row) -> Baseline:
        d = json.loads(row["data"])
        return cls(name=row["name"], stats=BaselineStats.from_json(d["stats"]),
                   fingerprint=Fingerprint.from_json(d.get("fingerprint")), host=row["host"],
                   server=row["server"], role=d.get("role"), created_at=row["created_at"],
                   source=d.get("source") or {}, note=d.get("note"), id=row["id"])


class BaselineStore:
    def __init__(self, path: Path | str) -> None:
        """Opens (creating) the store; StoreError (one line: the file and the fix) when it
        cannot be used: garbage, a directory, a read-only or full file system, a truncated DB."""
        self.path = Path(path)
        try:
            self._create()
        except (sqlite3.Error, OSError) as exc:
            raise store_error(self.path, exc) from None

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

    @classmethod
    def open_default(cls) -> BaselineStore:
        return cls(data_dir() / DB_NAME)

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=30.0, isolation_level=None)
        db.row_factory = sqlite3.Row
        db.execute("PRAGMA busy_timeout=30000")
        return db

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
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

    def _save(self, b: Baseline, replace: bool = False) -> int:
        with self._write() as db:
            old = db.execute("SELECT id FROM baselines WHERE name = ?", (b.name,)).fetchone()
            if old is not None:
                if not replace:
                    raise BaselineExists(b.name)
                db.execute("DELETE FROM baselines WHERE id = ?", (old["id"],))
            cur = db.execute(
                "INSERT INTO baselines (name, host, server, created_at, schema, data) VALUES (?,?,?,?,?,?)",
                (b.name, b.host, b.server, b.created_at, SCHEMA_VERSION, b.payload()))
            b.id = int(cur.lastrowid or 0)
            return b.id

    def _get(self, name: str) -> Baseline | None:
        db = self._connect()
        try:
            row = db.execute("SELECT * FROM baselines WHERE name = ?", (name,)).fetchone()
        finally:
            db.close()
        return Baseline.from_row(row) if row is not None else None

    def _list(self, host: str | None = None, server: str | None = None) -> list[dict[str, Any]]:
        """Rows without the samples: name, host, server, created_at and a one-line summary."""
        q = "SELECT * FROM baselines"
        where, args = [], []
        if host is not None:
            where.append("host = ?")
            args.append(host)
        if server is not None:
            where.append("server = ?")
            args.append(server)
        if where:
            q += " WHERE " + " AND ".join(where)
        q += " ORDER BY created_at, id"
        db = self._connect()
        try:
            rows = db.execute(q, args).fetchall()
        finally:
            db.close()
        out = []
        for row in rows:
            b = Baseline.from_row(row)
            best = b.stats.best()
            out.append({"name": b.name, "host": b.host, "server": b.server, "role": b.role,
                        "created_at": b.created_at, "strata": len(b.stats.strata),
                        "n": best.n if best else 0,
                        "median": round(best.median_thr, 2) if best and best.median_thr else None,
                        "stratum": best.stratum.describe() if best else None})
        return out

    def _delete(self, name: str) -> bool:
        with self._write() as db:
            cur = db.execute("DELETE FROM baselines WHERE name = ?", (name,))
            return cur.rowcount > 0

    def _guard(self, fn: Any, *args: Any, **kw: Any) -> Any:
        try:
            return fn(*args, **kw)
        except (sqlite3.Error, OSError, ValueError, KeyError, TypeError) as exc:
            raise store_error(self.path, exc) from None

    def save(self, b: Baseline, replace: bool = False) -> int:
        """Store `b` (BaselineExists when the name is taken and not `replace`)."""
        return int(self._guard(self._save, b, replace))

    def get(self, name: str) -> Baseline | None:
        got: Baseline | None = self._guard(self._get, name)
        return got

    def list(self, host: str | None = None, server: str | None = None) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = self._guard(self._list, host, server)
        return rows

    def delete(self, name: str) -> bool:
        return bool(self._guard(self._delete, name))
