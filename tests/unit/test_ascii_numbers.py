"""A port, count or index that a user typed, or that a file or a host's command line holds, is
read by one rule (numfmt.ascii_int): ASCII digits, few of them, in range. str.isdigit() holds
for '²' (int() then raises: "invalid literal for int()"), int() reads '١' as 1 and takes
' 1', '+1' and '1_0', and 5000 digits pass isdigit() and make int() raise."""

from __future__ import annotations

import pytest

from specmon.numfmt import ascii_int, ascii_port

# (no surrounding space: an address or target is stripped first)
NOT_ASCII_DIGITS = ["²", "١", "٣٠٠٠٠", "１", "+1", "-1", "1_0", "1 1", "", "1" * 5000]
IDS = [ascii(x) if len(x) < 10 else f"{len(x)} digits" for x in NOT_ASCII_DIGITS]


def test_ascii_int_reads_ascii_digits_in_range_only() -> None:
    assert ascii_int("0") == 0 and ascii_int("007") == 7 and ascii_int("9" * 18) == 10 ** 18 - 1
    assert ascii_int("9" * 19) is None and ascii_int(5) is None and ascii_int(None) is None
    assert ascii_int("5", 1, 4) is None and ascii_int("4", 1, 4) == 4
    for text in [*NOT_ASCII_DIGITS, " 1", "1 ", "1\n"]:
        assert ascii_int(text) is None, text
    assert ascii_port("65535") == 65535 and ascii_port("65536") is None
    assert ascii_port("0") is None and ascii_port("0", lo=0) == 0


@pytest.mark.parametrize("port", [*NOT_ASCII_DIGITS, "65536", "99999"], ids=[*IDS, "65536", "99999"])
def test_prometheus_listen_port_is_one_line_not_an_int_error(port: str) -> None:
    from specmon.export.prometheus import parse_listen

    with pytest.raises(ValueError) as exc:
        parse_listen(f":{port}")
    assert str(exc.value).startswith(f"bad port in {':' + port!r}: PORT must be ASCII digits, "
                                     "0-65535 (0: any free port)")
    assert parse_listen("127.0.0.1:0") == ("127.0.0.1", 0)  # an OS-chosen port


def test_record_prometheus_port_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from specmon.cli import main

    assert main(["record", "local", "--prometheus", ":²", "--out", "/nonexistent/o.jsonl"]) == 2
    err = capsys.readouterr().err
    assert err == ("specmon record: --prometheus: bad port in ':²': PORT must be ASCII digits, "
                   "0-65535 (0: any free port)\n"), err


@pytest.mark.parametrize("port", NOT_ASCII_DIGITS, ids=IDS)
def test_ssh_target_port(port: str) -> None:
    from specmon.sshtarget import read_target

    got = read_target(f"me@box:{port}")
    assert isinstance(got, str) and got.startswith("bad SSH port"), got
    assert len(got) < 40
    assert read_target("me@box:2222").port == 2222  # type: ignore[union-attr]


@pytest.mark.parametrize("value", ["²", "١", "1" * 5000, "70000"],
                         ids=["sup2", "arabic1", "5000 digits", "70000"])
def test_discovery_reads_a_hostile_port_or_tp_as_unknown(value: str) -> None:
    """Another user's process line is data: `--port ²` made find_servers raise (every server
    on the host went undiscovered); now that server's port is the default, its tp unknown."""
    from specmon.session.events import ServerInfo
    from specmon.sources.discovery import DEFAULT_PORT, Proc, find_servers

    argv = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", value,
            "--tp-size", value, "--pp-size", value, "--nnodes", value, "--base-gpu-id", value]
    ok = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30001",
          "--tp-size", "2"]
    servers = find_servers([Proc(10, 1, 1000, argv), Proc(20, 1, 1000, ok)])
    by_pid = {s.pid: s for s in servers}
    assert (by_pid[10].port, by_pid[10].port_from_args, by_pid[10].tp_size) == (
        DEFAULT_PORT, False, None)
    assert (by_pid[20].port, by_pid[20].tp_size) == (30001, 2)
    info = ServerInfo.from_discovered(by_pid[10])
    assert (info.tp_size, info.pp_size, info.nnodes, info.base_gpu_id) == (1, 1, 1, 0)


def test_fingerprint_tp_from_argv() -> None:
    from specmon.analysis.fingerprint import fingerprint_from

    assert fingerprint_from(argv=["x", "--tp-size", "²"]).tp_size is None
    assert fingerprint_from(argv=["x", "--tp", "1" * 5000]).tp_size is None
    assert fingerprint_from(argv=["x", "--tp-size", "4"]).tp_size == 4


@pytest.mark.parametrize("key", ["²|1|0|1", "1|²|0|1", "١|1|0|1"])
def test_a_stored_stratum_key_in_other_digits_is_not_a_key(key: str) -> None:
    from specmon.analysis.drift import Stratum

    with pytest.raises(ValueError, match="not a stratum key"):
        Stratum.from_key(key)
    assert Stratum.from_key("4|1|0|1").rr == 4


@pytest.mark.parametrize(("value", "expected"), [("3", 3), ("²", None)])
def test_a_vllm_count_in_other_digits_is_not_read(value: str, expected: int | None) -> None:
    """'Waiting: ² reqs' lost the whole line (int('²') raised inside the parser)."""
    from specmon.parse.sglang import parse_line

    line = ("(APIServer pid=92107) INFO 05-08 16:21:55 [loggers.py:271] Engine 000: Avg prompt "
            "throughput: 0.0 tokens/s, Avg generation throughput: 28.4 tokens/s, Running: 1 "
            f"reqs, Waiting: {value} reqs, GPU KV cache usage: 0.0%")
    rec = parse_line(line.encode())
    assert rec is not None and rec.gen_throughput == 28.4  # type: ignore[union-attr]
    assert rec.queue_req == expected  # type: ignore[union-attr]
