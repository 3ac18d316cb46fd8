"""Test data for the snapshot/replay/report tests: record files in `specmon record`'s format."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from specmon.parse.sglang import parse_line
from specmon.session.state import HostState

T0 = 1_772_000_000.0
BASE_LOG = "sglang-longlogs/cli991-qwen25-3b-bs1.log.gz"  # baseline, bs 1
SPEC_LOG = "sglang-longlogs/rtxpro6000-agentic-spec-bs1.log.gz"  # speculative, bs 1

DECODE = ("[2026-02-26 19:16:45 TP0] Decode batch, #running-req: {rr}, #token: 900, token usage: "
          "0.04, {acc}cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: 0")
SPEC_ARGS = ("[2026-02-26 19:16:40] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, "
             "speculative_algorithm='EAGLE3', speculative_num_steps=2, speculative_eagle_topk=1, "
             "speculative_num_draft_tokens=3, port=30001)")
BASE_ARGS = "[2026-02-26 19:16:40] server_args=ServerArgs(model_path='Qwen/Qwen3-8B', tp_size=1, port=30000)"


def decode_line(gt: float, rr: int = 1, accept: float | None = None) -> str:
    acc = f"accept len: {accept:.2f}, accept rate: 0.70, " if accept is not None else ""
    return DECODE.format(rr=rr, gt=gt, acc=acc)


def read_data(path: Path) -> bytes:
    """A data file's bytes; the long real logs are stored gzipped."""
    raw = path.read_bytes()
    return gzip.decompress(raw) if path.suffix == ".gz" else raw


def fixture_lines(data_dir: Path, rel: str, limit: int | None = None) -> list[str]:
    lines = read_data(data_dir / rel).decode("utf-8").splitlines()
    return lines[:limit] if limit else lines


def timed(servers: dict[str, list[str]], t0: float = T0, dt: float = 0.5
          ) -> list[tuple[str, str, float]]:
    """(server, line, received_at) for every line, servers interleaved by time."""
    rows = [(name, line, t0 + i * dt + k * 0.01)
            for k, (name, lines) in enumerate(servers.items()) for i, line in enumerate(lines)]
    rows.sort(key=lambda r: r[2])
    return rows


def write_record(path: Path, rows: list[tuple[str, str, float]],
                 gpus: list[tuple[float, list[dict]]] | None = None) -> Path:
    """A file in `specmon record --out` format (optionally with `gpus` rows)."""
    offsets: dict[str, int] = {}
    out = []
    for server, line, t in rows:
        off = offsets.get(server, 0)
        rec = parse_line(line)
        out.append(json.dumps({"server": server, "path": f"/var/log/{server}.log", "offset": off,
                               "line": line, "received_at": t,
                               "record": rec.to_json() if rec is not None else None}))
        offsets[server] = off + len(line.encode()) + 1
    for t, samples in gpus or []:
        out.append(json.dumps({"gpus": samples, "received_at": t}))
    path.write_text("\n".join(out) + "\n", encoding="utf-8")
    return path


def reference_session(rows: list[tuple[str, str, float]], until: float | None = None,
                      host: str = "unknown") -> HostState:
    """What the live pipeline would hold: every line applied at its receive time."""
    s = HostState(host=host)
    for server, line, t in rows:
        if until is not None and t > until:
            continue
        s.server(server).apply(line, parse_line(line), t)
    return s
