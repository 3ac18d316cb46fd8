"""Mutated snapshots: every document either loads or is refused with a SnapshotError (one line);
whatever loads can be reported, replayed (timeline) and written again as strict JSON."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings
from kit.hostile import mutated_docs
from kit.snapshots import BASE_ARGS, SPEC_ARGS, T0, decode_line, write_record

from specmon.export.report import build_blocks, render_html, render_markdown
from specmon.export.snapshot import SnapshotError, decode, encode, snapshot_from_record, to_doc
from specmon.feeds.replay import ReplayFeed


def _base_doc(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("fuzz")
    rows = [("base", BASE_ARGS, T0), ("spec", SPEC_ARGS, T0 + 0.5)]
    rows += [("base", decode_line(88.0 + i % 3), T0 + 1 + i) for i in range(8)]
    rows += [("spec", decode_line(94.0, accept=2.4), T0 + 1.5 + i) for i in range(8)]
    gpus = [(T0 + i, [{"index": 0, "ts": T0 + i, "clock_sm": 1980, "power_w": 300.0}])
            for i in range(3)]
    snap = snapshot_from_record(write_record(tmp / "r.jsonl", sorted(rows, key=lambda r: r[2]),
                                             gpus), host="h")
    snap.alerts = [{"t": T0 + 3, "server": "base", "message": "m", "cause": "c"}]
    return to_doc(snap)


DOC: dict = {}


def test_fuzzed_snapshots_load_or_fail_with_one_line(tmp_path_factory) -> None:
    DOC.update(_base_doc(tmp_path_factory))

    @settings(max_examples=300, suppress_health_check=list(HealthCheck), deadline=None)
    @given(mutated_docs(DOC))
    def check(doc: dict) -> None:
        raw = json.dumps(doc, allow_nan=True).encode()  # NaN/Infinity as Python writes them
        try:
            snap = decode(raw, "fuzz.json")
        except SnapshotError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("fuzz.json")
            return
        blocks = build_blocks(snap)
        for text in (render_markdown(blocks), render_html(blocks)):
            assert "\x1b" not in text and "<script>alert" not in text
        ReplayFeed(snap, playing=False)  # the timeline builds
        json.loads(encode(snap), parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))

    check()


def test_markdown_of_a_snapshot_forms_no_link_or_image(tmp_path_factory) -> None:
    """A server name or model path of `![x](https://...)` would load a remote image in a
    Markdown viewer: brackets from a snapshot are escaped (and a backslash before them too)."""
    doc = _base_doc(tmp_path_factory)
    evil = "m![t](https://evil.example/p.png)[c](javascript:alert(1))\\[d](x)"
    doc["servers"][0]["name"] = evil
    doc["servers"][0]["lines"][0][2]["data"]["model_path"] = evil
    md = render_markdown(build_blocks(decode(json.dumps(doc).encode(), "s.json")))
    assert md.count("evil.example") >= 2  # the text is shown
    body = md.replace("\\\\", "")  # escaped backslashes; what is left before a bracket escapes it
    unescaped = [i for i, c in enumerate(body) if c in "[]" and body[i - 1:i] != "\\"]
    assert not unescaped, [body[max(0, i - 30):i + 30] for i in unescaped[:3]]


def test_markdown_text_keeps_a_comparison_sign_and_escapes_what_makes_markup():
    """'>= 3 samples' reads as written in the .md file (a `>` alone opens no tag); `<`, `&` and
    brackets stay text."""
    from specmon.export.report import _md_text

    assert _md_text("no batch size has >= 3 decode samples") == \
        "no batch size has >= 3 decode samples"
    assert _md_text("<script>&x ![i](http://e)") == "&lt;script>&amp;x !\\[i\\](http://e)"
