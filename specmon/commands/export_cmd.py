"""`specmon export RECORD.jsonl -o SNAPSHOT`: a record file as a session snapshot."""

from __future__ import annotations

import argparse
import sys

from specmon.errors import CliError
from specmon.export.snapshot import SnapshotError, snapshot_from_record, write_snapshot


def run(args: argparse.Namespace) -> int:
    if args.log_lines < 0:
        raise CliError(f"--log-lines must be >= 0, got {args.log_lines}")
    if args.gpu_max_samples < 1:
        raise CliError(f"--gpu-max-samples must be >= 1, got {args.gpu_max_samples}")
    try:
        snap = snapshot_from_record(args.record, host=args.host, log_lines=args.log_lines,
                                    gpu_max_per_gpu=args.gpu_max_samples)
    except SnapshotError as exc:
        raise CliError(str(exc)) from None
    try:
        path = write_snapshot(snap, args.out, redact=not args.no_redact,
                              compress=True if args.gzip else None)
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
