"""An offline command's stdout checks what it writes as bytes (`parse --json` rows) exactly as
what it writes as text: plain bytes pass untouched, anything else is made visible first."""

from __future__ import annotations

import io
import json

from hypothesis import given
from hypothesis import strategies as st

from specmon.cli import main
from specmon.textsafe import SafeStream, is_plain, is_plain_bytes, visible_lines

EVIL = "\x1b]52;c;ZXZpbA==\x07 \x9b31m \u202eevil \x00"


def _stream() -> tuple[SafeStream, io.BytesIO]:
    raw = io.BytesIO()
    return SafeStream(io.TextIOWrapper(raw, encoding="utf-8", write_through=True)), raw


def test_plain_bytes_pass_and_control_bytes_are_made_visible() -> None:
    out, raw = _stream()
    out.buffer.write(b'{"a":1,"b":"x\\u001by"}\n\t')
    assert raw.getvalue() == b'{"a":1,"b":"x\\u001by"}\n\t'
    out.buffer.write(EVIL.encode())
    shown = raw.getvalue().decode()
    assert "\\x1b" in shown and "\\x9b" in shown and "\\u202e" in shown and "\\x00" in shown
    assert not any(c in shown for c in "\x1b\x07\x9b\u202e\x00")


@given(st.binary(max_size=64))
def test_bytes_are_plain_exactly_when_their_text_is(data: bytes) -> None:
    assert is_plain_bytes(data) == (data.isascii() and is_plain(data.decode("ascii")))
    out, raw = _stream()
    out.buffer.write(data)
    shown = raw.getvalue().decode()  # what reached the stream: no control character left
    assert visible_lines(shown) == shown


def test_parse_json_rows_reach_stdout_through_the_check(tmp_path, capsysbinary) -> None:
    log = tmp_path / "s.log"
    log.write_text(f"[2026-02-26 19:16:40] server_args=ServerArgs(model_path='{EVIL}')\n")
    assert main(["parse", "--json", str(log)]) == 0
    out = capsysbinary.readouterr().out
    assert out.isascii() and b"\x1b" not in out
    # escaped by JSON, not changed (the parser drops NULs, as everywhere)
    assert json.loads(out)["model_path"] == EVIL.replace("\x00", "")


def test_bidi_marks_and_invisible_characters_are_shown_as_escapes() -> None:
    """ALM, LRM/RLM reorder a line like the overrides do; zero-width characters and the BOM
    hide text (a `sk-` key split by U+200B reads as two words, unseen)."""
    from specmon.textsafe import visible

    for c in "\u061c\u200b\u200c\u200d\u200e\u200f\u2060\u2064\ufeff":
        shown = visible(f"a{c}b")
        assert shown == f"a\\u{ord(c):04x}b", (hex(ord(c)), shown)
    assert visible("caf\u00e9 \u4e2d\u6587") == "caf\u00e9 \u4e2d\u6587"  # letters stay


def test_ctrl_c_while_the_command_modules_import_is_exit_130_without_traceback(monkeypatch,
                                                                                capsys) -> None:
    """SIGINT in the first ~0.2 s of `record` landed in an import inside build_parser, outside
    the handler that turns it into exit 130: a KeyboardInterrupt traceback."""
    from specmon import cli

    def interrupted(name: str | None) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "build_parser", interrupted)
    assert cli.main(["record", "local", "--out", "x.jsonl"]) == 130
    assert capsys.readouterr().err == ""
