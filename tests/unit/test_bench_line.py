"""How a benchmark reads in every front end (`session.benchmarks.line`): each number says what
it is. The log's figure is SGLang's last decode line (one log interval), not a median over the
benchmark: shown beside the end-to-end figure it must not read as the run's decode-only rate."""

from __future__ import annotations

from specmon.session.benchmarks import line

BASE = {"server": "base", "kind": "builtin", "concurrency": 1, "output_len": 128,
        "completed": 20, "output_tok_s": 27.4, "mean_ttft_ms": 11.4, "mean_itl_ms": 36.63}


def test_the_logs_figure_names_its_one_interval() -> None:
    text = line({**BASE, "server_gen_throughput": 26.44})
    assert "end-to-end output 27.4 tok/s" in text
    assert "log's last decode line 26.4 tok/s (decode-only, one interval)" in text
    assert "accept length N/A" in text  # nothing measured, nothing shown


def test_no_log_figure_is_na_not_a_number() -> None:
    text = line({**BASE, "server_gen_throughput": float("nan")})
    assert text.endswith("log decode-only tok/s N/A")
    assert "nan" not in text


def test_a_number_no_float_holds_is_na_not_an_overflow() -> None:
    """A server's JSON (or a snapshot's) may hold 10**400: math.isfinite() of it raised
    OverflowError in the shared check (benchmarks.finite, now numfmt.finite) and in
    control.benchmark.info_numbers; it is no measurement: N/A."""
    from specmon.control.benchmark import info_numbers
    from specmon.numfmt import finite, unix_time

    assert finite(10 ** 400) is None and finite(-(10 ** 400)) is None
    assert finite(10 ** 15) == 1e15 and finite(True) is None and finite("1") is None
    assert unix_time(1e300) is None and unix_time(1.78e9) == 1.78e9
    text = line({**BASE, "output_tok_s": 10 ** 400, "server_gen_throughput": 10 ** 400})
    assert "end-to-end output N/A tok/s" in text and text.endswith("log decode-only tok/s N/A")
    assert info_numbers({"internal_states": [{"avg_spec_accept_length": 10 ** 400,
                                              "last_gen_throughput": 12.5}]}) == (None, 12.5)


def test_a_run_where_no_request_completed_is_a_failure_in_one_line() -> None:
    """`server bench` exits 1 with this line when nothing completed (BenchResult.failure)."""
    from specmon.control.benchmark import BenchResult

    def result(**kw: object) -> BenchResult:
        base = dict(server="base", kind="builtin", started_at=0.0, completed=0, failed=4,
                    concurrency=1, output_len=8, duration_s=0.1, total_output_tokens=0,
                    output_tok_s=None, mean_ttft_ms=None, median_ttft_ms=None, mean_itl_ms=None,
                    median_itl_ms=None, p99_itl_ms=None, accept_length=None)
        return BenchResult(**{**base, **kw})

    assert result(errors=["HTTP 503: down\n  " + "x" * 500]).failure() == (
        "base: all 4 requests failed (first error: HTTP 503: down " + "x" * 142 + "...)")
    assert result(kind="bench_serving").failure() == (
        "base: all 4 requests failed (bench_serving: no error reported)")
    assert result(failed=0).failure() == "base: no request completed (builtin: no error reported)"
    assert result(completed=1, failed=3, errors=["e"]).failure() is None
