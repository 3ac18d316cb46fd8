"""Round trip: record -> export -> replay shows the same numbers as the live session had; the
replay feed's clock, seeking, GPU batches and re-fired alerts."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys

import pytest
from kit.snapshots import (
    BASE_ARGS,
    BASE_LOG,
    SPEC_ARGS,
    SPEC_LOG,
    T0,
    decode_line,
    fixture_lines,
    reference_session,
    timed,
    write_record,
)

from specmon.cli import main
from specmon.export.snapshot import (
    Snapshot,
    read_snapshot,
    snapshot_from_record,
    snapshot_from_session,
)
from specmon.export.timeline import NOT_KEPT
from specmon.feeds.replay import ReplayFeed
from specmon.parse.gpu_sample import GpuSample
from specmon.session.state import HostState
from specmon.session.window import current_stats, speedup
from specmon.ui.replay_app import ReplayApp
from specmon.ui.widgets import SpeedupBar


def _rows(data_dir):
    """Both servers over the same ~350 s, interleaved."""
    base = timed({"base": [BASE_ARGS] + fixture_lines(data_dir, BASE_LOG, 700)}, dt=0.5)
    spec = timed({"spec": [SPEC_ARGS] + fixture_lines(data_dir, SPEC_LOG)}, t0=T0 + 0.003, dt=1.07)
    return sorted(base + spec, key=lambda r: r[2])


def _numbers(session: HostState, now: float, window_s: float = 60.0) -> dict:
    """Everything the panels and the speedup bar show, as plain values."""
    out = {}
    for name, s in sorted(session.servers.items()):
        out[name] = (s.role, s.status, s.decode_total, s.prefill_total, s.last_decode,
                     current_stats(s, now, window_s), s.args.get("speculative_num_draft_tokens"))
    base, spec = session.by_role("baseline"), session.by_role("speculative")
    out["speedup"] = speedup(base, spec, now, window_s) if base and spec else None
    return out


async def _until(pilot, cond, what: str, steps: int = 400) -> None:
    for _ in range(steps):
        if cond():
            return
        await pilot.pause(0.02)
    raise AssertionError(f"timed out waiting for {what}")


async def test_record_export_replay_shows_the_same_numbers(data_dir, tmp_path, capsys):
    rows = _rows(data_dir)
    rec = write_record(tmp_path / "r.jsonl", rows)
    snap_path = tmp_path / "s.json.gz"
    assert main(["export", str(rec), "-o", str(snap_path), "--host", "gpu-1"]) == 0
    snap = read_snapshot(snap_path)
    end = rows[-1][2]
    mid = T0 + 120.0
    full, half = reference_session(rows), reference_session(rows, until=mid)
    assert _numbers(full, end)["speedup"] is not None  # the comparisons below are not vacuous
    assert _numbers(half, mid)["speedup"] is not None

    app = ReplayApp(snap, playing=False)
    async with app.run_test(size=(160, 50)) as pilot:
        assert app.clock() == snap.time_range[0]
        await pilot.press("G")  # jump to the end: everything is pushed at its recorded time
        await _until(pilot, lambda: app.session.servers["base"].lines_total == 701, "end")
        await pilot.pause()
        assert app.clock() == end
        assert _numbers(app.session, app.clock()) == _numbers(full, end)
        for name in ("base", "spec"):
            assert list(app.session.servers[name].log) == list(full.servers[name].log)
        app.refresh_view()
        sp = _numbers(full, end)["speedup"]
        assert f"{sp.ratio:.2f}x vs live baseline" in str(app.query_one(SpeedupBar).content)

        await pilot.press("g")  # back to the start: the session starts over
        await _until(pilot, lambda: app.session.servers["base"].decode_total == 0, "reset")
        for _ in range(12):  # 12 x 10 s forward = the middle
            await pilot.press("full_stop")
        await _until(pilot, lambda: app.clock() == mid, "seek")
        await _until(pilot, lambda: app.session.servers["base"].lines_total
                     == half.servers["base"].lines_total, "mid")
        await pilot.pause()
        assert _numbers(app.session, mid) == _numbers(half, mid)
        assert "❚❚ paused" in app.replay_status() and "00:02:00.0" in app.replay_status()
    capsys.readouterr()


async def test_replay_plays_on_the_virtual_clock_and_holds_the_end(tmp_path):
    rows = [("b", decode_line(80.0 + i), T0 + i) for i in range(20)]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows))
    app = ReplayApp(snap, speed=128.0)
    async with app.run_test(size=(120, 40)) as pilot:
        await _until(pilot, lambda: app.replay.at_end, "end of playback")
        await pilot.pause()
        assert app.session.servers["b"].decode_total == 20
        assert not app.replay.playing and app.clock() == T0 + 19
        assert "■ end" in app.replay_status()
        await pilot.press("left_square_bracket")
        assert app.replay.speed == 64.0
        await pilot.press("space")  # play at the end starts over
        await _until(pilot, lambda: app.replay.at_end and not app.replay.playing
                     and app.replay.pushed_lines == 20, "second run")


async def test_session_export_replays_to_the_same_decode_numbers(data_dir, tmp_path):
    rows = _rows(data_dir)
    live = reference_session(rows, host="h")
    snap = snapshot_from_session(live)  # what the UI's export key writes
    end = rows[-1][2]
    app = ReplayApp(snap, playing=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("G")
        await _until(pilot, lambda: app.session.servers["spec"].decode_total
                     == live.servers["spec"].decode_total
                     and app.session.servers["base"].lines_total == 701, "end")
        await pilot.pause()
        assert _numbers(app.session, end) == _numbers(live, end)


async def test_export_and_screenshot_keys_write_files(tmp_path):
    rows = [("b", decode_line(80.0 + i), T0 + i) for i in range(5)]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows), host="box")
    app = ReplayApp(snap, playing=False, export_dir=tmp_path / "out")
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("G")
        await _until(pilot, lambda: app.session.servers["b"].decode_total == 5, "end")
        await pilot.press("e")
        await pilot.press("s")
        await _until(pilot, lambda: len(list((tmp_path / "out").glob("specmon-box-*"))) == 2,
                     "files")
    snaps = list((tmp_path / "out").glob("specmon-box-*.json.gz"))
    svgs = list((tmp_path / "out").glob("specmon-box-*.svg"))
    assert len(snaps) == 1 and len(svgs) == 1
    assert [e.record.gen_throughput for e in read_snapshot(snaps[0]).servers[0].decode_entries()] \
        == [80.0, 81.0, 82.0, 83.0, 84.0]
    assert "<svg" in svgs[0].read_text()[:2000]


class _Sink:
    def __init__(self) -> None:
        self.calls: list[tuple] = []
        self.ticks: list[float] = []  # the model's clock, on the recorded seconds
        self.pids: list[tuple] = []

    def tick(self, now=None):
        self.ticks.append(now)

    def declare_server(self, host, server, role, path):
        self.calls.append(("declare", server, role))

    def server_pids(self, host, server, pids):
        self.pids.append((server, list(pids)))

    def lines(self, host, server, items):
        self.calls.append(("lines", server, [(it.text, it.t) for it in items]))

    def gpus(self, host, samples, error=None):
        self.calls.append(("gpus", [(g.index, g.ts) for g in samples]))

    def server_exited(self, host, server, code):
        self.calls.append(("exit", server, code))

    def notice(self, host, server, text):
        self.calls.append(("notice", server, text))

    def host_state(self, host, state):
        pass  # a replay is always "connected"


def _feed_snapshot(tmp_path) -> Snapshot:
    rows = [("b", decode_line(80.0 + i), T0 + i) for i in range(10)]
    gpus = [(T0 + i, [{"index": g, "clock_sm": 1980, "ts": T0 + i} for g in (0, 1)])
            for i in (2, 6)]
    snap = snapshot_from_record(write_record(tmp_path / "r.jsonl", rows, gpus), log_lines=3)
    snap.alerts = [{"t": T0 + 4.5, "server": "b", "message": "throughput fell", "cause": "power cap"}]
    snap.servers[0].exit_code = 1
    snap.servers[0].pids = [4242, 4243]  # launcher and worker
    return snap


async def test_feed_pushes_each_kind_at_its_time_and_rewinds(tmp_path):
    snap = _feed_snapshot(tmp_path)
    resets: list[int] = []
    sink = _Sink()
    feed = ReplayFeed(snap, playing=False, reset=lambda: resets.append(len(sink.calls)))
    task = asyncio.create_task(feed.run(sink))

    async def settle(cond):
        for _ in range(500):
            if cond():
                return
            await asyncio.sleep(0.01)
        raise AssertionError(sink.calls)

    try:
        await settle(lambda: len(sink.calls) >= 2)
        assert sink.calls[0] == ("declare", "b", "baseline")
        assert sink.pids == [("b", [4242, 4243])]  # the GPUs' owners, as the report knows them
        feed.seek(T0 + 5)
        await settle(lambda: any(c[0] == "notice" for c in sink.calls))
        await settle(lambda: sink.calls[-1][0] == "lines" and sink.calls[-1][2][-1][1] == T0 + 5)
        timeline = [(c[0], [t for _, t in c[2]]) if c[0] == "lines" else c for c in sink.calls[1:]]
        assert timeline == [
            ("lines", [T0]),  # paused at the start: the first instant is shown
            ("lines", [T0 + 1]),  # a batch per recorded second: the model ticks between them
            ("lines", [T0 + 2]),
            ("gpus", [(0, T0 + 2), (1, T0 + 2)]),  # one batch per poll, after same-time lines
            ("lines", [T0 + 3]),
            ("lines", [T0 + 4]),
            ("notice", "b", "alert: throughput fell (likely cause: power cap)"),  # at T0 + 4.5
            ("lines", [T0 + 5]),
        ]
        # the model ticks at each new recorded second, before that second's first event
        assert sink.ticks == [T0 + k for k in range(1, 6)]
        texts = [x for c in sink.calls if c[0] == "lines" for x, _ in c[2]]
        assert texts == [NOT_KEPT] * 6  # only the last 3 raw lines were kept
        feed.seek(T0 + 100)
        await settle(lambda: sink.calls[-1][0] == "exit")
        assert sink.calls[-1] == ("exit", "b", 1)
        assert feed.at_end and feed.now() == T0 + 9
        n = len(sink.calls)
        feed.seek(T0 + 1)
        await settle(lambda: resets and len(sink.calls) > n + 1)
        assert resets == [n]
        assert sink.calls[n][0] == "declare"
        assert [t for c in sink.calls[n:] if c[0] == "lines" for _, t in c[2]] == [T0, T0 + 1]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task


def test_virtual_clock_follows_speed_pause_and_seek():
    snap = Snapshot(time_range=(100.0, 200.0))
    wall = [0.0]
    feed = ReplayFeed(snap, speed=4.0, playing=True, wall=lambda: wall[0])
    wall[0] = 2.5
    assert feed.now() == 110.0
    feed.pause()
    wall[0] = 50.0
    assert feed.now() == 110.0
    feed.set_speed(2.0)
    feed.play()
    wall[0] = 55.0
    assert feed.now() == 120.0
    feed.seek_by(-500)
    assert feed.now() == 100.0
    wall[0] = 1000.0
    assert feed.now() == 200.0  # never past the end
    feed.faster()
    assert feed.speed == 4.0
    feed.slower()
    feed.slower()
    assert feed.speed == 1.0


async def test_gpu_samples_and_alerts_reach_the_session_in_replay(tmp_path):
    snap = _feed_snapshot(tmp_path)
    assert [(g.index, g.ts) for g in snap.gpu_samples] == [
        (0, T0 + 2), (1, T0 + 2), (0, T0 + 6), (1, T0 + 6)]
    app = ReplayApp(snap, playing=False)
    async with app.run_test(size=(120, 40)) as pilot:
        app.replay.seek(T0 + 4)
        await _until(pilot, lambda: app.session.servers["b"].decode_total == 5, "t0+4")
        assert [(g.index, g.ts) for g in app.session.gpus] == [(0, T0 + 2), (1, T0 + 2)]
        assert not app.session.servers["b"].notices
        await pilot.press("G")
        await _until(pilot, lambda: app.session.servers["b"].status == "crashed", "exit")
        assert [(g.index, g.ts) for g in app.session.gpus] == [(0, T0 + 6), (1, T0 + 6)]
        assert all(isinstance(g, GpuSample) for g in app.session.gpus)
        assert list(app.session.servers["b"].notices) == [
            "alert: throughput fell (likely cause: power cap)"]


async def test_real_record_then_export_then_replay_end_to_end(data_dir, tmp_path, capsys):
    """The real `specmon record local` (run twice, the second time --append re-reading both
    files), `specmon export`, then replay: the numbers of the live pipeline, no duplicates."""
    base_lines = [BASE_ARGS] + fixture_lines(data_dir, BASE_LOG, 200)
    spec_lines = [SPEC_ARGS] + fixture_lines(data_dir, SPEC_LOG)
    (tmp_path / "base.log").write_text("\n".join(base_lines) + "\n")
    (tmp_path / "spec.log").write_text("\n".join(spec_lines) + "\n")
    out = tmp_path / "rec.jsonl"
    want = len(base_lines) + len(spec_lines)

    async def record(append: bool) -> None:
        cmd = [sys.executable, "-m", "specmon", "record", "local", "--whole-file",
               "--log", f"base={tmp_path / 'base.log'}", "--log", f"spec={tmp_path / 'spec.log'}",
               "--out", str(out)] + (["--append"] if append else [])
        target = want * (2 if append else 1)
        proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        try:
            for _ in range(3000):
                if out.exists() and out.read_bytes().count(b"\n") >= target:
                    break
                await asyncio.sleep(0.02)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(60) == 0, proc.stderr.read()
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            proc.stderr.close()

    await record(append=False)
    rows = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(rows) == want
    ref_rows = [(r["server"], r["line"], r["received_at"]) for r in rows]
    await record(append=True)  # re-reads both files: every line a second time
    assert main(["export", str(out), "-o", str(tmp_path / "s.json.gz")]) == 0
    assert "duplicate lines dropped" in capsys.readouterr().err
    snap = read_snapshot(tmp_path / "s.json.gz")
    assert {s.name: s.counts["lines"] for s in snap.servers} == {
        "base": len(base_lines), "spec": len(spec_lines)}
    live = reference_session(ref_rows)
    end = max(r[2] for r in ref_rows)
    assert _numbers(live, end)["speedup"] is not None
    app = ReplayApp(snap, playing=False)
    async with app.run_test(size=(160, 50)) as pilot:
        await pilot.press("G")
        await _until(pilot, lambda: app.session.servers["spec"].lines_total == len(spec_lines)
                     and app.session.servers["base"].lines_total == len(base_lines), "end")
        await pilot.pause()
        assert _numbers(app.session, end) == _numbers(live, end)


def test_a_seek_keeps_each_probe_at_its_recorded_time(tmp_path):
    """A seek to the end pushes every event at once: a host probe took the replay's clock (the
    end), so a snapshot exported from the replay moved the probe that found a patched file to
    after the run it belongs to ('modified files: none')."""
    from specmon.export.timeline import declare
    from specmon.session.fleet import FleetSession

    snap = _feed_snapshot(tmp_path)
    s0 = snap.servers[0]
    t1 = s0.entries[1].t
    s0.probes = [(t1, True, {"version": "0.5.23", "modified_files": ["sglang/srt/x.py"]})]
    feed = ReplayFeed(snap, playing=False)
    fleet = FleetSession([snap.host], clock=lambda: feed.end)
    declare(fleet, snap)
    feed._push_due(fleet, feed.end)
    (t, running, _), = fleet.host(snap.host).session.server(s0.name).probe_events
    assert t == t1 != feed.end and running
