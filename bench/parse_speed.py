"""Benchmark: `specmon parse` against grep, a previous version and a JSON reference, one run.

    python bench/parse_speed.py [--lines 1000000] [--repeat 3] [--json-lines 100000]
                                [--against VERSION_OR_PATH] [--steps]

Builds a log of real SGLang line formats (bench/loggen.py: decode, prefill, access and start-up
lines), checks on its first --json-lines lines that the summary fast path agrees exactly with
the general parser, then times each command end to end (process start included), each run in
turn, best of --repeat; wall = elapsed, CPU = user + sys of the process and its workers
(getrusage of the children), spread = slowest / best wall over the repeats:

  * `grep -c 'gen throughput' FILE` (stdout a pipe: GNU grep stops at the first match when it
    writes to /dev/null), the reference for the summary (issue 25's target: within 10x, wall
    and CPU);
  * `specmon parse FILE` of this tree;
  * bench/parse_floor.py FILE: a Python process that only counts the lines and finds the batch
    lines (one literal-first regex, no field read): what any Python scan of them costs at least;
  * with --against, the same command of another version: a wheel file, or a git rev (a commit,
    a tag, or a version with a `v` tag) built here into a wheel;
  * `specmon parse --json` on the first --json-lines lines against bench/json_reference.py,
    which only reads each line and json.dumps a small dict (target: within 1.5x), and with
    --against against that version's `parse --json`.

With --steps it also prints where the summary's CPU goes: each step of the scan of one 64 MiB
chunk (the unit `specmon parse` reads), timed in a fresh process per repeat (objects and
hashes cold, as in a real run), best of --repeat.

The machine's load average is printed before and after: figures from a busy machine say so.
The last lines are `ratio NAME VALUE` rows for bench/run_all.py.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))
from loggen import write_log  # noqa: E402


def usable_cpus() -> int:
    """CPUs this process may run on (taskset), as specmon parse counts them."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


Timing = tuple[float, float]  # (wall s, CPU s)


# Commands run from a directory without a `specmon` folder, so that PYTHONPATH decides which
# specmon is imported (Python puts the working directory first).
NEUTRAL = tempfile.gettempdir()


def timed(cmd: Sequence[str], env: dict[str, str] | None, to_pipe: bool) -> Timing:
    """One run: wall time and the CPU time of the process tree (waited-for children)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    out = subprocess.PIPE if to_pipe else subprocess.DEVNULL
    subprocess.run(cmd, check=True, stdout=out, env=env, cwd=NEUTRAL)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


class Case:
    def __init__(self, name: str, cmd: list[str], env: dict[str, str] | None = None,
                 to_pipe: bool = True) -> None:
        self.name, self.cmd, self.env, self.to_pipe = name, cmd, env, to_pipe
        self.runs: list[Timing] = []

    def run(self) -> None:
        self.runs.append(timed(self.cmd, self.env, self.to_pipe))

    @property
    def wall(self) -> float:
        return min(w for w, _ in self.runs)

    @property
    def cpu(self) -> float:
        return min(c for _, c in self.runs)

    @property
    def spread(self) -> float:
        return max(w for w, _ in self.runs) / self.wall


def interleaved(cases: list[Case], repeat: int) -> None:
    """Each case once per round, so a load change hits all of them alike."""
    for _ in range(repeat):
        for c in cases:
            c.run()


def env_with(path: Path) -> dict[str, str]:
    """An environment whose `import specmon` finds the package under `path` first, with
    Python's bytecode cache on as it is by default: a PYTHONDONTWRITEBYTECODE=1 left in the
    environment (some sandboxes set it) makes every run compile specmon's ~60 modules again,
    0.1 s of each one's start-up that a user's second run does not pay."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    env["PYTHONPATH"] = os.pathsep.join([str(path), env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    return env


def install_against(spec: str, tmp: Path) -> tuple[Path, str]:
    """A directory holding another version's `specmon` package, and its label."""
    wheel = Path(spec)
    label = wheel.name
    if not (wheel.is_file() and wheel.suffix == ".whl"):
        rev = next((r for r in (spec, f"v{spec}") if subprocess.run(
            ["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet", f"{r}^{{commit}}"],
            capture_output=True).returncode == 0), None)
        if rev is None:
            raise SystemExit(f"--against {spec}: neither a wheel file nor a git rev of this repo")
        src = tmp / "src"
        src.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", rev], check=True,
                                 capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps",
                        "--no-build-isolation", "-w", str(tmp / "dist"), str(src)], check=True)
        wheel = next((tmp / "dist").glob("*.whl"))
        label = rev
    site = tmp / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(wheel)], check=True)
    found = subprocess.run([sys.executable, "-c", "import specmon; print(specmon.__file__)"],
                           env=env_with(site), capture_output=True, text=True, check=True,
                           cwd=NEUTRAL)
    if not found.stdout.startswith(str(site)):
        raise SystemExit(f"--against {spec}: the installed wheel is not the one imported")
    return site, label


def chunk_steps(path: Path) -> list[tuple[str, float]]:
    """CPU ms of each step of the summary of the file's first chunk, in this (fresh) process,
    in the order `summarise_buffer` runs them."""
    import gc
    from collections import Counter
    from operator import itemgetter

    from specmon.analysis import logfile
    from specmon.parse import fastscan

    out: list[tuple[str, float]] = []
    box: list[Any] = [None]

    def step(name: str, fn: Callable[[], Any]) -> None:
        t = time.process_time()
        box[0] = fn()
        out.append((name, (time.process_time() - t) * 1000))

    with open(path, "rb") as fh:
        step("read the chunk", lambda: fh.read(logfile.CHUNK))
    buf: bytes = box[0]
    end = buf.rfind(b"\n") + 1
    step("NUL and CR checks", lambda: (buf.find(b"\x00", 0, end), buf.find(b"\r", 0, end)))
    step("vLLM marker searches (3)",
         lambda: [p.search(buf, 0, end) for p in logfile._VLLM_MARKS])
    step("line count", lambda: buf.count(b"\n", 0, end))
    step("server_args= search (run cuts)", lambda: buf.find(logfile.RUN_MARK, 0, end))
    gc.disable()  # as fastscan.scan_buffer does
    step("batch regex findall", lambda: fastscan._BATCH.findall(buf, 0, end))
    lines = box[0]
    step("decode marker count", lambda: buf.count(b"Decode batch", 0, end))
    step("count (rr, spec, gt) keys", lambda: Counter(map(fastscan._KEY, lines)))
    step("count accept len values", lambda: Counter(map(itemgetter(2), lines)))
    step("free the matches", lambda: lines.clear())
    gc.enable()
    step("whole summarise_buffer, again", lambda: logfile.summarise_buffer(buf, "x", end))
    return out


def print_steps(path: Path, repeat: int) -> None:
    best: dict[str, float] = {}
    for _ in range(repeat):
        res = subprocess.run([sys.executable, __file__, "--_steps-child", str(path)],
                             env=env_with(ROOT), capture_output=True, text=True, check=True,
                             cwd=NEUTRAL)
        for row in res.stdout.splitlines():
            name, ms = row.rsplit("\t", 1)
            best[name] = min(best.get(name, float("inf")), float(ms))
    print(f"CPU per step, first 64 MiB chunk, fresh process, best of {repeat}:")
    for name, ms in best.items():
        print(f"  {name:34} {ms:8.1f} ms")


def check_agreement(path: Path, n_lines: int) -> bool:
    from specmon.analysis.logfile import summarise, summarise_general

    fast = summarise(str(path))
    slow = summarise_general(path.read_bytes())
    ok = fast.comparable() == slow.comparable()
    print(f"fast path agrees with the general parser on {n_lines:,} lines: {ok}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lines", type=int, default=1_000_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json-lines", type=int, default=100_000,
                    help="lines for the --json timing and the agreement check (0: skip both)")
    ap.add_argument("--against", metavar="VERSION_OR_PATH",
                    help="a wheel file or a git rev (commit, tag, version with a v tag)")
    ap.add_argument("--steps", action="store_true",
                    help="also print the CPU of each step of one chunk's scan")
    ap.add_argument("--_steps-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args._steps_child:
        for name, ms in chunk_steps(Path(args._steps_child)):
            print(f"{name}\t{ms:.3f}")
        return 0
    grep = shutil.which("grep")
    if grep is None:
        print("grep not found: no reference to compare against", file=sys.stderr)
        return 2
    py = sys.executable
    here = env_with(ROOT)
    load0 = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        path = write_log(tmp / "server.log", args.lines)
        size = path.stat().st_size
        small = write_log(tmp / "small.log", args.json_lines) if args.json_lines else None
        if small is not None and not check_agreement(small, args.json_lines):
            return 1
        cases = [Case("grep -c 'gen throughput'", [grep, "-c", "gen throughput", str(path)]),
                 Case("specmon parse (this tree)", [py, "-m", "specmon", "parse", str(path)],
                      here),
                 Case("python floor (parse_floor.py)",
                      [py, str(ROOT / "bench/parse_floor.py"), str(path)], here)]
        site: Path | None = None
        if args.against:
            site, label = install_against(args.against, tmp)
            cases.append(Case(f"specmon parse ({label})", [py, "-m", "specmon", "parse",
                                                            str(path)], env_with(site)))
        interleaved(cases, args.repeat)
        json_cases: list[Case] = []
        if small is not None:
            json_cases = [
                Case("json_reference.py", [py, str(ROOT / "bench/json_reference.py"), str(small)],
                     here, to_pipe=False),
                Case("specmon parse --json", [py, "-m", "specmon", "parse", "--json", str(small)],
                     here, to_pipe=False)]
            if site is not None:  # the other version's --json, in the same interleaved runs
                json_cases.append(Case(f"--json ({label})", [py, "-m", "specmon", "parse",
                                                            "--json", str(small)],
                                       env_with(site), to_pipe=False))
            interleaved(json_cases, args.repeat)
        if args.steps:
            print_steps(path, args.repeat)
    load1 = os.getloadavg()
    grep_c = cases[0]
    print(f"file: {args.lines:,} lines, {size / 1e6:.1f} MB (bench/loggen.py); cpus: "
          f"{usable_cpus()}; best of {args.repeat}, runs interleaved; load average (1 min) "
          f"{load0[0]:.2f} before, {load1[0]:.2f} after")
    print(f"{'command':34} {'wall s':>8} {'CPU s':>8} {'spread':>7} {'wall/grep':>10} "
          f"{'CPU/grep':>9}")
    for c in cases:
        print(f"{c.name:34} {c.wall:8.3f} {c.cpu:8.3f} {c.spread:6.2f}x {c.wall / grep_c.wall:9.1f}x"
              f" {c.cpu / grep_c.cpu:8.1f}x")
    ours = cases[1]
    ratios = [("parse_wall_vs_grep", ours.wall / grep_c.wall),
              ("parse_cpu_vs_grep", ours.cpu / grep_c.cpu)]
    print(f"target: within 10x grep, wall and CPU: "
          f"{'met' if max(r for _, r in ratios) <= 10 else 'NOT met'}")
    floor = cases[2]
    ratios += [("floor_wall_vs_grep", floor.wall / grep_c.wall),
               ("floor_cpu_vs_grep", floor.cpu / grep_c.cpu)]
    if len(cases) > 3:
        ratios += against("parse", ours, cases[3])
    if json_cases:
        ref, js = json_cases[:2]
        print(f"JSON, {args.json_lines:,} lines to /dev/null: reference {ref.wall:.3f} s wall "
              f"{ref.cpu:.3f} s CPU; specmon parse --json {js.wall:.3f} s wall {js.cpu:.3f} s CPU;"
              f" ratio wall {js.wall / ref.wall:.2f}x CPU {js.cpu / ref.cpu:.2f}x (target: "
              f"within 1.5x: {'met' if js.wall <= 1.5 * ref.wall else 'NOT met'})")
        ratios += [("json_wall_vs_reference", js.wall / ref.wall),
                   ("json_cpu_vs_reference", js.cpu / ref.cpu)]
        if len(json_cases) > 2:
            ratios += against("json", js, json_cases[2])
    for name, value in ratios:
        print(f"ratio {name} {value:.2f}")
    return 0


def against(what: str, ours: Case, old: Case) -> list[tuple[str, float]]:
    """This tree against the --against version's same command: printed, and its ratio rows."""
    label = old.name[old.name.index("(") + 1:-1]
    print(f"{'parse --json' if what == 'json' else 'parse'}, this tree / {label}: wall "
          f"{ours.wall / old.wall:.2f}x, CPU {ours.cpu / old.cpu:.2f}x (below 1: this tree is "
          "faster)")
    return [(f"{what}_wall_vs_against", ours.wall / old.wall),
            (f"{what}_cpu_vs_against", ours.cpu / old.cpu)]


if __name__ == "__main__":
    raise SystemExit(main())
