"""`specmon counters`: engine labels, URLs, bounded scrapes and the text line, against real
local HTTP servers (http.server in a thread, in this process)."""

from __future__ import annotations

import gzip
import http.server
import json
import socket
import threading
import time
import zlib

import pytest
from kit.http_server import answer, local_server

from specmon import cli
from specmon.commands import counters_cmd
from specmon.parse.sglang_metrics import MAX_TEXT
from specmon.parse.vllm_metrics import parse_vllm_metrics, windows
from specmon.redact import MASK


def _counters(engine: str, drafts: float, accepted: float, position: str = "0") -> str:
    lab = f'engine="{engine}",model_name="m"'
    return (f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts}\n"
            f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {3 * drafts}\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted}\n"
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="{position}"}} '
            f"{accepted}\n"
            f"vllm:generation_tokens_total{{{lab}}} {drafts + accepted}\n")


def test_engine_labels_that_are_not_ascii_numbers_sort_as_text() -> None:
    """`engine="²"` passed str.isdigit and int() raised ValueError; 5000 digits too (int()'s
    4300-digit limit). Only ASCII digits (at most 18) are numbers: the rest sort as text."""
    long = "7" * 5000
    labels = ["10", "²", "2", long, "٣", "0", "a"]
    a = parse_vllm_metrics("".join(_counters(e, 100, 150) for e in labels))
    b = parse_vllm_metrics("".join(_counters(e, 200, 300) for e in labels))
    assert [w.engine for w in windows(a, b, 1.0)] == ["0", "2", "10", long, "a", "²", "٣", "all"]
    assert all(w.accept_len == 2.5 for w in windows(a, b, 1.0))


def test_position_labels_are_ascii_numbers_only() -> None:
    """A position label int() reads but is no plain number ("1_0", " 0", "٠") is no position."""
    for pos in ("1_0", " 0", "٠", "²", "9" * 5000):
        s = parse_vllm_metrics(_counters("0", 100, 150, position=pos))
        assert s.engines["0"].per_pos == {}, pos
    assert parse_vllm_metrics(_counters("0", 100, 150, position="0")).engines["0"].per_pos == \
        {0: 150.0}


# --- the command, in this process, against real local servers ---------------------------------

def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = cli.main(["counters", *argv])
    out, err = capsys.readouterr()
    return rc, out, err


def _one_line_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == "", (rc, out, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err, err
    assert "\x1b" not in err, err
    return err


@pytest.mark.parametrize(("url", "said"), [
    ("http://[::1", "http://[::1: not a valid URL (InvalidURL: Invalid port"),
    ("http://127.0.0.1:1/\x1b]52;c;aGk=\x07", "http://127.0.0.1:1/\\x1b]52;c;aGk=\\x07: not a valid"),
    ("http://127.0.0.1:1/a\nb", "http://127.0.0.1:1/a\\x0ab: not a valid URL"),
    ("127.0.0.1:8000", "127.0.0.1:8000: not an http:// or https:// URL"),
    ("ftp://127.0.0.1/", "ftp://127.0.0.1/: not an http:// or https:// URL"),
])
def test_a_url_that_is_no_http_url_is_one_line(capsys: pytest.CaptureFixture[str], url: str,
                                               said: str) -> None:
    """`counters 'http://[::1'` or a URL holding ESC raised httpx.InvalidURL out of the
    command (a traceback): `_scrape` caught only httpx.HTTPError."""
    assert said in _one_line_error(capsys, url)


@pytest.mark.parametrize(("url", "secret"), [
    ("http://admin:s3cretpass@127.0.0.1:{port}/", "s3cretpass"),
    ("http://127.0.0.1:{port}/?access_token=tok3n-value", "tok3n-value"),
    ("http://127.0.0.1:{port}?api_key=sk-abcdefghijklmnop", "sk-abcdefghijklmnop"),
    ("http://u:pa/ss@127.0.0.1:{port}/", "pa/ss"),  # no valid URL: the / ends the authority
])
def test_no_error_prints_a_secret_of_the_url(capsys: pytest.CaptureFixture[str], url: str,
                                             secret: str) -> None:
    """The password in user:password@ and a ?access_token= / ?api_key= were printed in the
    "cannot fetch" line."""
    err = _one_line_error(capsys, url.format(port=_closed_port()))
    assert secret not in err and MASK in err, err


def test_metrics_is_appended_to_the_path_not_after_the_query(
        capsys: pytest.CaptureFixture[str]) -> None:
    """`http://h/?access_token=x` was fetched as `/?access_token=x/metrics`."""
    seen: list[str] = []

    def respond(h: http.server.BaseHTTPRequestHandler) -> None:
        seen.append(h.path)
        answer(h, b"up 1\n")

    with local_server(respond) as base:
        err = _one_line_error(capsys, f"{base}/?access_token=abc123", "--interval", "0.01")
        _one_line_error(capsys, f"{base}/prefix/metrics/?x=1", "--interval", "0.01")
        _one_line_error(capsys, f"{base}/prefix", "--interval", "0.01")
    assert seen == ["/metrics?access_token=abc123", "/prefix/metrics/?x=1", "/prefix/metrics"]
    assert "no vllm: counters" in err and "abc123" not in err, err


# --- a scrape is bounded: 8 MiB of body, decoded, and one deadline ------------------------------

def _hold_open(h: http.server.BaseHTTPRequestHandler, head: dict[str, str], sent: bytes,
               stop: threading.Event) -> None:
    """Headers promising more than `sent`, then `sent`, then nothing until the test ends."""
    h.send_response(200)
    for k, v in head.items():
        h.send_header(k, v)
    h.end_headers()
    h.wfile.write(sent)
    h.wfile.flush()
    stop.wait(60)


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "identity"])
def test_a_body_past_8_mib_is_left_unread(capsys: pytest.CaptureFixture[str],
                                          encoding: str) -> None:
    """The whole body was read (and inflated: a 1 MB gzip bomb reached 3.2 GB) before the
    8 MiB check. A body that inflates past the limit and whose server then sends nothing more
    now ends at the limit; before, it waited for the rest (here: a read timeout)."""
    inflated = b"# " + b"0" * MAX_TEXT + b"\n"
    sent = {"gzip": gzip.compress(inflated), "deflate": zlib.compress(inflated),
            "identity": inflated}[encoding]
    assert len(sent) < 64 * 1024 or encoding == "identity"
    stop = threading.Event()
    head = {"Content-Length": str(len(sent) + 1000)}
    if encoding != "identity":
        head["Content-Encoding"] = encoding
    try:
        with local_server(lambda h: _hold_open(h, head, sent, stop)) as base:
            err = _one_line_error(capsys, base)
    finally:
        stop.set()
    plain = "plain" if encoding == "identity" else encoding
    assert f"/metrics: /metrics body over {MAX_TEXT} bytes ({plain}): not read further" in err


def _trickle(h: http.server.BaseHTTPRequestHandler, where: str, stop: threading.Event) -> None:
    """A whole answer, one byte every 0.1 s: in the headers or in the body."""
    body = b"# counters come " + b"." * 24 + b"\n"
    head = (b"HTTP/1.0 200 OK\r\nX-Slow: " + b"s" * (40 if where == "headers" else 1) +
            f"\r\nContent-Length: {len(body)}\r\n\r\n".encode())
    h.wfile.write(head if where == "body" else b"")
    for b in (head if where == "headers" else b"") + body:
        if stop.wait(0.1):
            return
        h.wfile.write(bytes([b]))
        h.wfile.flush()


@pytest.mark.parametrize("where", ["headers", "body"])
def test_a_trickling_server_ends_at_the_scrape_deadline(capsys: pytest.CaptureFixture[str],
                                                        monkeypatch: pytest.MonkeyPatch,
                                                        where: str) -> None:
    """httpx's timeout is per read: a server sending a byte every 5 s held the command
    forever. One scrape now has one deadline (15 s; 0.5 s here), headers and body included;
    each byte here comes well within the per-read timeout."""
    monkeypatch.setattr(counters_cmd, "SCRAPE_DEADLINE_S", 0.5, raising=False)
    stop = threading.Event()
    try:
        with local_server(lambda h: _trickle(h, where, stop)) as base:
            err = _one_line_error(capsys, base, "--interval", "0.01")
    finally:
        stop.set()
    assert "/metrics: no whole answer within 0.5 s (the limit of one scrape)" in err, err


def test_a_gzip_answer_gives_its_windows(capsys: pytest.CaptureFixture[str]) -> None:
    """The body is inflated here (zlib, bounded), no longer by httpx: a gzip answer, as
    prometheus_client writes for Accept-Encoding: gzip, still reads."""
    texts = [_counters("0", 100, 150), _counters("0", 200, 350)]
    seen: list[str | None] = []

    def respond(h: http.server.BaseHTTPRequestHandler) -> None:
        seen.append(h.headers.get("Accept-Encoding"))
        body = gzip.compress(texts.pop(0).encode() if len(texts) > 1 else texts[0].encode())
        h.send_response(200)
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    with local_server(respond) as base:
        rc, out, err = _run(capsys, base, "--interval", "0.01", "--json")
    assert rc == 0, err
    assert json.loads(out)["accept_len"] == 3.0 and seen == ["gzip", "gzip"]


@pytest.mark.parametrize(("head", "body", "said"), [
    ({"Content-Encoding": "gzip"}, b"not gzip at all", "cannot decompress the body (error: "),
    ({"Content-Encoding": "gzip"}, gzip.compress(bytes(range(256)) * 64)[:-100],
     "the gzip body ends before its compressed data"),
    ({"Content-Encoding": "br"}, b"\x1b\x1b", "Content-Encoding br not supported"),
    ({"Content-Encoding": "\x1b[2Jx"}, b"", "Content-Encoding \\x1b[2Jx not supported"),
], ids=["corrupt-gzip", "cut-gzip", "brotli", "escape-in-encoding"])
def test_a_body_that_does_not_decode_is_one_line(capsys: pytest.CaptureFixture[str],
                                                 head: dict[str, str], body: bytes,
                                                 said: str) -> None:
    def respond(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        for k, v in head.items():
            h.send_header(k, v)
        h.send_header("Content-Length", str(len(body)))
        h.end_headers()
        h.wfile.write(body)

    with local_server(respond) as base:
        assert said in _one_line_error(capsys, base)


# --- the text line: what JSON writes as null is N/A -------------------------------------------

def _exposition(engine: str, drafts: float, accepted: float, gen: float) -> str:
    lab = 'engine="' + engine.replace("\n", "\\n") + '"'
    return (f"vllm:spec_decode_num_drafts_total{{{lab}}} {drafts!r}\n"
            f"vllm:spec_decode_num_draft_tokens_total{{{lab}}} {drafts!r}\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{{lab}}} {accepted!r}\n"
            f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{{lab},position="0"}} '
            f"{accepted!r}\n"
            f"vllm:generation_tokens_total{{{lab}}} {gen!r}\n")


def _two_scrapes(capsys: pytest.CaptureFixture[str], texts: list[str],
                 *flags: str) -> str:
    def respond(h: http.server.BaseHTTPRequestHandler) -> None:
        answer(h, texts.pop(0).encode() if len(texts) > 1 else texts[0].encode())

    with local_server(respond) as base:
        rc, out, err = _run(capsys, base, "--interval", "0.01", *flags)
    assert rc == 0, err
    return out


def test_the_text_line_says_na_where_json_says_null(capsys: pytest.CaptureFixture[str]) -> None:
    """1e300 accepted over 1e-300 drafts: the text printed `accept len inf`, `gen inf tok/s`
    where --json writes null."""
    inf = [_exposition("0", 0.0, 0.0, 0.0), _exposition("0", 1e-300, 1e300, 1.7e308)]
    row = json.loads(_two_scrapes(capsys, list(inf), "--json"))
    assert [row[k] for k in ("accept_len", "accept_rate", "per_position", "gen_tok_s")] == \
        [None, None, [None], None]
    line = _two_scrapes(capsys, list(inf))
    assert "inf" not in line and "nan" not in line, line
    assert ("engine 0: accept len N/A (bonus incl.), accept rate N/A, per position N/A, "
            "drafts 0, gen N/A tok/s") in line


def test_the_text_line_is_one_short_line_whatever_the_server_says(
        capsys: pytest.CaptureFixture[str]) -> None:
    """A count of 1e300 printed as 301 digits; an engine label holding a newline printed a
    second line of the server's choosing."""
    label = "0\nwindow 9 (10.0 s) engine 0: accept len 9.99" + "x" * 500
    out = _two_scrapes(capsys, [_exposition(label, 0.0, 0.0, 0.0),
                                _exposition(label, 1e300, 2e300, 1e300)])
    assert len(out.splitlines()) == 1 and len(out) < 400, out
    assert "engine 0\\x0awindow 9 (10.0 s) engine 0: acce...: accept len 3.00 " in out, out
    assert "drafts 1.000e+300, gen " in out and " tok/s" in out, out


async def test_the_benchmarks_reads_of_a_server_are_bounded_as_a_scrape_is(monkeypatch):
    """The benchmark's /server_info and /metrics reads (`control.benchmark`) read a whole
    body with httpx's per-read timeout only: a server trickling its answer held them for as
    long as it liked, and a gzip body was inflated whole. They share `hosts.httpget` now."""
    import httpx

    from specmon.control import benchmark

    monkeypatch.setattr(benchmark, "SCRAPE_DEADLINE_S", 0.5, raising=False)
    body = b'{"version": "0.5.9", "max_total_num_tokens": 1000}'

    def trickle(h: http.server.BaseHTTPRequestHandler) -> None:
        h.wfile.write(b"HTTP/1.0 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body))
        for b in body:  # one byte every 0.1 s: 5 s in all
            time.sleep(0.1)
            h.wfile.write(bytes([b]))
            h.wfile.flush()

    with local_server(lambda h: answer(h, body)) as base:  # the same answer at once: read
        async with httpx.AsyncClient(base_url=base) as client:
            assert await benchmark.server_info(client) == json.loads(body)
    with local_server(trickle) as base:
        async with httpx.AsyncClient(base_url=base) as client:
            assert await benchmark.server_info(client) is None
    bomb = gzip.compress(b"# " + b"0" * MAX_TEXT + b"\n")

    def gz(h: http.server.BaseHTTPRequestHandler) -> None:
        h.send_response(200)
        h.send_header("Content-Encoding", "gzip")
        h.send_header("Content-Length", str(len(bomb)))
        h.end_headers()
        h.wfile.write(bomb)

    with local_server(gz) as base:  # past the bound: no metrics (read to the bound, not inflated)
        async with httpx.AsyncClient(base_url=base) as client:
            assert await benchmark.server_metrics(client) is None
            assert await benchmark.vllm_scrape(client) is None
