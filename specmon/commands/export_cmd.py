"""`specmon export RECORD.jsonl -o SNAPSHOT`: a record file as a session snapshot."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from specmon.errors import CliError
from specmon.export.snapshot import (
    SnapshotError,
    SymlinkOutputError,
    atomic_write_bytes,
    encode,
    gzip_for,
    snapshot_from_record,
    symlink_refusal,
)
from specmon.interrupt import killable


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.description = ("Convert RECORD.jsonl (one object per received line: server, path, offset, "
                     "line, received_at, record) into a specmon.snapshot/1 document. Written "
                     "atomically; secrets are redacted; gzip when -o ends in .gz or with --gzip. "
                     "A symbolic link at -o is refused (exit 2, nothing written) unless --force.")
    p.add_argument("record", metavar="RECORD.jsonl")
    p.add_argument("-o", "--out", required=True, metavar="SNAPSHOT", help="snapshot file to write")
    p.add_argument("--gzip", action="store_true", help="gzip the snapshot whatever its name")
    p.add_argument("--force", action="store_true",
                   help="replace a symbolic link at -o with the snapshot (the link, not its "
                   "target; without --force such a link is refused)")
    p.add_argument("--host", help="host name to record in the snapshot (default: unknown)")
    p.add_argument("--log-lines", type=int, default=5000, metavar="N",
                   help="raw log lines kept per server (records are always all kept; default 5000)")
    p.add_argument("--gpu-max-samples", type=int, default=2000, metavar="N",
                   help="GPU samples per GPU before downsampling (default 2000)")
    p.add_argument("--no-redact", action="store_true",
                   help="keep secrets (tokens, keys, passwords) in the snapshot; off by default")


def _warn(message: str) -> None:
    """A problem that cost part of the input, not the export (a torn last row): one line."""
    print(f"specmon export: {message}", file=sys.stderr)


def run(args: argparse.Namespace) -> int:
    if args.log_lines < 0:
        raise CliError(f"--log-lines must be >= 0, got {args.log_lines}")
    if args.gpu_max_samples < 1:
        raise CliError(f"--gpu-max-samples must be >= 1, got {args.gpu_max_samples}")
    refusal = None if args.force else symlink_refusal(args.out, "--out ")
    if refusal is not None:
        raise CliError(refusal)
    out = Path(args.out)
    try:
        # reading, building and encoding write nothing: an interrupt ends them at once
        # (specmon/interrupt.py); the write below runs under the handlers that remove its temp
        with killable():
            snap = snapshot_from_record(args.record, host=args.host, log_lines=args.log_lines,
                                        gpu_max_per_gpu=args.gpu_max_samples, warn=_warn)
            data = encode(snap, redact=not args.no_redact,
                          compress=gzip_for(out, True if args.gzip else None))
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    try:
        path = atomic_write_bytes(out, data, force=args.force)
    except SymlinkOutputError as exc:  # made a link since the check above
        raise CliError(symlink_refusal(args.out, "--out ") or str(exc)) from None
    except OSError as exc:
        raise CliError(f"cannot write {args.out}: {exc.strerror or exc}") from None
    n_dec = sum(len(s.decode_entries()) for s in snap.servers)
    dups = snap.source.get("duplicate_lines_dropped", 0)
    print(f"specmon export: {len(snap.servers)} server(s), {n_dec} decode records, "
          f"{len(snap.gpu_samples)} GPU samples"
          + (f", {dups} duplicate lines dropped" if dups else "")
          + (", secrets NOT redacted" if args.no_redact else "")
          + f" -> {path}", file=sys.stderr)
    return 0
