"""Recorded baselines in SQLite (WAL) under the platformdirs user data dir.

Several specmon processes may record, list and delete at once: WAL mode, a busy timeout and
`BEGIN IMMEDIATE` write transactions keep every write whole; a name is unique, so recording an
existing name fails unless `replace=True` (then the old row is replaced in the same transaction).
`SPECMON_DATA_DIR` overrides the folder (tests, CI).
"""

from __future__ import annotations

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
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._connect() as db:
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

    def save(self, b: Baseline, replace: bool = False) -> int:
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

    def get(self, name: str) -> Baseline | None:
        db = self._connect()
        try:
            row = db.execute("SELECT * FROM baselines WHERE name = ?", (name,)).fetchone()
        finally:
            db.close()
        return Baseline.from_row(row) if row is not None else None

    def list(self, host: str | None = None, server: str | None = None) -> list[dict[str, Any]]:
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

    def delete(self, name: str) -> bool:
        with self._write() as db:
            cur = db.execute("DELETE FROM baselines WHERE name = ?", (name,))
            return cur.rowcount > 0
