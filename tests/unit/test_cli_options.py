"""Option values checked where they are parsed (specmon/commands/options.py): a bad count or
duration is one usage line naming the option (exit 2) before any config is read or any server
started, by the same rule everywhere."""

from __future__ import annotations

import pytest

from specmon.cli import main


def usage_error(capsys, argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert lines[0].startswith("usage: ") and "Traceback" not in err, err
    return lines[-1]


# (the config named does not exist: parsing refuses the value before anything reads it)
SERVER = ["server", "start", "base", "--config", "/nonexistent/specmon.toml"]


@pytest.mark.parametrize("value", ["-1", "0", "nan", "inf", "1e400", "86401", "x", ""])
def test_server_timeout_is_a_duration_by_the_config_rule(capsys, value):
    line = usage_error(capsys, [*SERVER, "--timeout", value])
    assert line == ("specmon server: error: argument --timeout: must be seconds, more than 0 and "
                    f"at most 86400, a day, got {value!r}")


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "1e400"])
def test_server_grace_is_a_duration_and_may_be_zero(capsys, value):
    line = usage_error(capsys, ["server", "stop", "base", "--grace", value])
    assert line.startswith("specmon server: error: argument --grace: must be seconds, 0 or more")


@pytest.mark.parametrize(("option", "value"), [
    ("--num-prompts", "-5"), ("--num-prompts", "0"), ("--num-prompts", "100001"),
    ("--concurrency", "0"), ("--concurrency", "-1"), ("--concurrency", "1.5"),
    ("--output-len", "0"), ("--output-len", "²"), ("--output-len", " 8"),
])
def test_server_bench_counts_are_positive_whole_numbers(capsys, option, value):
    line = usage_error(capsys, ["server", "bench", "base", option, value])
    assert line.startswith(f"specmon server: error: argument {option}: must be a positive whole "
                           "number (ASCII digits), at most ")
    assert line.endswith(f"got {value!r}")


def test_good_values_parse():
    from specmon.cli import build_parser

    args = build_parser("server").parse_args(
        ["server", "bench", "base", "--timeout", "2.5", "--grace", "0", "--num-prompts", "3",
         "--concurrency", "2", "--output-len", "16"])
    assert (args.timeout, args.grace, args.num_prompts, args.concurrency, args.output_len) == (
        2.5, 0.0, 3, 2, 16)
    args = build_parser("server").parse_args(["server", "bench", "base"])
    assert (args.timeout, args.grace, args.num_prompts, args.concurrency, args.output_len) == (
        None, 30.0, 8, 1, 128)
