"""CPU cost of the live UI: `specmon connect local` against a bare Textual app, same run.

For 2, 8 and 32 logs, each written at 2 lines/s (real SGLang decode lines), this runs
`specmon connect local --log ...` in a tmux pane (a real terminal, 160x48), then a bare Textual
app with the same widgets (headline digits, one panel per visible server with its summary text
and log, the Plotext chart, the GPU text) that tails the same files and redraws at 4 Hz, and
measures each one's CPU time (its whole process tree, from /proc) over the same window.

    python bench/ui_cost.py [--seconds 12] [--logs 2,8,32]

It prints one row per log count: CPU % of one core for specmon (its process tree: the UI and
the host agent that tails the files; and the UI process alone) and the bare app, their ratio,
and how specmon's CPU grew against the number of visible panels and of tailed logs.
Needs tmux. Keep it short: it costs CPU.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HZ = os.sysconf("SC_CLK_TCK")
COLS, ROWS = 160, 48
PANEL_W = 40  # specmon keeps panels 40 columns wide; the row scrolls beyond that

DECODE = ("[{ts} TP0] Decode batch, #running-req: 1, #token: {tok}, token usage: 0.00, {acc}"
          "cuda graph: True, gen throughput (token/s): {gt:.2f}, #queue-req: 0")


def names(n: int) -> list[str]:
    out = ["baseline", "speculative"]
    out += [f"srv{i}" for i in range(3, n + 1)]
    return out[:n]


def writer(paths: list[Path], rate: float, stop: threading.Event) -> None:
    """Appends one decode line to every log every 1/rate s."""
    k = 0
    files = [open(p, "a", encoding="utf-8") for p in paths]  # noqa: SIM115
    try:
        while not stop.wait(1.0 / rate):
            ts = time.strftime("%Y-%m-%d %H:%M:%S")
            for i, f in enumerate(files):
                acc = "accept len: 2.40, accept rate: 0.70, " if i % 2 else ""
                f.write(DECODE.format(ts=ts, tok=600 + (k * 40) % 500, acc=acc,
                                      gt=(94.0 if i % 2 else 88.8) + (k % 5) * 0.3) + "\n")
                f.flush()
            k += 1
    finally:
        for f in files:
            f.close()


def own_cpu(pid: int) -> float:
    """CPU seconds of `pid` alone (the UI process, without the host agent it runs)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    rest = raw[raw.rindex(")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / HZ


def tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of `pid` and its live descendants."""
    children: dict[int, list[int]] = {}
    ticks: dict[int, int] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            raw = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        rest = raw[raw.rindex(")") + 2:].split()
        ppid, ut, st = int(rest[1]), int(rest[11]), int(rest[12])
        children.setdefault(ppid, []).append(int(d))
        ticks[int(d)] = ut + st
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        total += ticks.get(p, 0)
        todo.extend(children.get(p, []))
    return total / HZ


def run_in_tmux(cmd: str, warmup: float, seconds: float, session: str) -> tuple[float, float]:
    """CPU % of one core that `cmd` (its process tree; its own process) uses over `seconds`,
    after `warmup`, in a real terminal."""
    tmux = ["tmux", "-L", session, "-f", "/dev/null"]  # a private server per run
    script = Path(tempfile.mkdtemp(prefix="specmon-uicost-cmd-")) / "run.sh"
    script.write_text(f"exec {cmd}\n", encoding="utf-8")
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", str(COLS), "-y", str(ROWS),
                    f"sh {shlex.quote(str(script))}"], check=True)
    try:
        pid = int(subprocess.run([*tmux, "list-panes", "-t", session, "-F", "#{pane_pid}"],
                                 check=True, capture_output=True, text=True).stdout.split()[0])
        time.sleep(warmup)
        c0, o0, t0 = tree_cpu(pid), own_cpu(pid), time.monotonic()
        time.sleep(seconds)
        c1, o1, t1 = tree_cpu(pid), own_cpu(pid), time.monotonic()
        if not Path(f"/proc/{pid}").exists():
            raise RuntimeError(f"{cmd!r} exited early")
        screen = subprocess.run([*tmux, "capture-pane", "-p", "-t", session], check=True,
                                capture_output=True, text=True).stdout
        if "speedup" not in screen:  # it must have drawn what it is measured drawing
            raise RuntimeError(f"{cmd!r} did not draw its screen:\n{screen}")
        return 100.0 * (c1 - c0) / (t1 - t0), 100.0 * (o1 - o0) / (t1 - t0)
    finally:
        subprocess.run([*tmux, "kill-server"], check=False, capture_output=True)
        shutil.rmtree(script.parent, ignore_errors=True)


def measure(n: int, seconds: float, warmup: float) -> tuple[float, float, float]:
    tmp = Path(tempfile.mkdtemp(prefix="specmon-uicost-"))
    paths = [tmp / f"{name}.log" for name in names(n)]
    for p in paths:
        p.touch()
    stop = threading.Event()
    t = threading.Thread(target=writer, args=(paths, 2.0, stop), daemon=True)
    t.start()
    py = shlex.quote(sys.executable)
    logs = " ".join(f"--log {name}={shlex.quote(str(p))}" for name, p in
                    zip(names(n), paths, strict=True))
    env = "TERM=xterm-256color"
    try:
        spec, spec_ui = run_in_tmux(f"env {env} {py} -m specmon connect local {logs} --history 0 "
                           f"--export-dir {shlex.quote(str(tmp))}", warmup, seconds,
                           f"uicost-specmon-{os.getpid()}")
        bare, _ = run_in_tmux(f"env {env} {py} {shlex.quote(__file__)} --bare "
                           + " ".join(shlex.quote(str(p)) for p in paths), warmup, seconds,
                           f"uicost-bare-{os.getpid()}")
    finally:
        stop.set()
        t.join()
        shutil.rmtree(tmp, ignore_errors=True)
    return spec, bare, spec_ui


# --- the bare app: the same widgets, the obvious code -------------------------------------------


def bare_app(paths: list[str]) -> None:
    from textual.app import App, ComposeResult
    from textual.containers import Horizontal, Vertical
    from textual.widgets import Digits, Footer, Header, Log, Static
    from textual_plotext import PlotextPlot

    visible = max(1, min(len(paths), COLS // PANEL_W))

    class Bare(App[None]):
        CSS = """
        #head { height: 4; } #servers { height: 19; } .panel { border: round $primary; }
        .panel Log { height: 1fr; } #chart { height: 1fr; } #gpus { height: 4; }
        """

        def compose(self) -> ComposeResult:
            yield Header()
            with Horizontal(id="head"):
                yield Digits("1.06x", id="digits")
                yield Static("", id="speed")
                yield Static("", id="drift")
            with Horizontal(id="servers"):
                for i in range(visible):
                    with Vertical(classes="panel"):
                        yield Static("", id=f"sum{i}")
                        yield Log(id=f"log{i}")
            yield PlotextPlot(id="chart")
            yield Static("", id="gpus")
            yield Footer()

        def on_mount(self) -> None:
            self.files = [open(p, encoding="utf-8") for p in paths]  # noqa: SIM115
            for f in self.files:
                f.seek(0, 2)
            self.vals: list[list[float]] = [[] for _ in paths]
            self.set_interval(0.25, self.tick)

        def tick(self) -> None:
            new = False
            for i, f in enumerate(self.files):
                for line in f.readlines():
                    try:
                        v = float(line.rsplit("(token/s): ", 1)[1].split(",")[0])
                    except (IndexError, ValueError):
                        continue
                    self.vals[i] = (self.vals[i] + [v])[-300:]
                    new = True
                    if i < visible:
                        self.query_one(f"#log{i}", Log).write_line(line.rstrip("\n"))
            for i in range(visible):
                v = self.vals[i]
                self.query_one(f"#sum{i}", Static).update(
                    f"median {sorted(v)[len(v) // 2] if v else 0:.2f} tok/s\nlast "
                    f"{v[-1] if v else 0:.2f}\nn {len(v)}\nKV cache\ncuda graph on")
            self.query_one("#speed", Static).update(f"speedup {len(self.vals[0])}\nx\ny")
            self.query_one("#drift", Static).update("baseline OK\nspeculative OK")
            self.query_one("#gpus", Static).update("GPUs: N/A\nbaseline\nspeculative")
            if not new:
                return  # like specmon: the chart is redrawn when a line arrived
            plt = self.query_one(PlotextPlot).plt
            plt.clear_figure()
            for v in self.vals[:2]:
                if v:
                    plt.plot(v, marker="braille")
            self.query_one(PlotextPlot).refresh()

    Bare().run()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=12.0)
    ap.add_argument("--warmup", type=float, default=6.0)
    ap.add_argument("--logs", default="2,8,32")
    ap.add_argument("--bare", nargs="+", metavar="LOG", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.bare:
        bare_app(args.bare)
        return 0
    if shutil.which("tmux") is None:
        print("ui_cost: needs tmux (apt-get install tmux)", file=sys.stderr)
        return 2
    counts = [int(x) for x in args.logs.split(",")]
    print(f"{'logs':>5} {'visible':>7} {'specmon %CPU':>13} {'(UI process)':>13} "
          f"{'bare %CPU':>10} {'ratio':>6}")
    first: tuple[int, int, float, float] | None = None
    for n in counts:
        spec, bare, ui = measure(n, args.seconds, args.warmup)
        vis = min(n, COLS // PANEL_W)
        print(f"{n:>5} {vis:>7} {spec:>13.1f} {ui:>13.1f} {bare:>10.1f} "
              f"{spec / bare if bare else 0:>6.2f}", flush=True)
        if first is None:
            first = (n, vis, spec, ui)
        else:
            n0, v0, s0, u0 = first
            print(f"{'':>5} specmon CPU x{spec / s0:.2f} (UI process x{ui / u0:.2f}) vs {n0} "
                  f"logs; visible panels x{vis / v0:.2f}, logs x{n / n0:.0f}", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
