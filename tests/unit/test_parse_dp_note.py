"""`specmon parse` (the summary) of a DP-attention log counts each DP group's own line; it says
so, since `parse --runs`, `compare` and the panel give the server's sum per interval (real
logs from tests/data/sglang-longlogs)."""

from __future__ import annotations

from specmon.cli import main

NOTE = "DP attention: the log holds the lines of several DP groups, and each row counts"


def test_the_summary_says_its_rows_are_one_dp_groups_lines(data_dir, capsys) -> None:
    logs = data_dir / "sglang-longlogs"
    assert main(["parse", str(logs / "ascend-qwen3coder-480b-dp4.log.gz")]) == 0
    out = capsys.readouterr().out
    assert NOTE in out.splitlines()
    rows = {x.split()[0]: x.split()[1] for x in out.splitlines() if x.strip()[:1].isdigit()}
    assert rows["20"] == "1,200"  # four groups at 20 each: the server ran 80 (see --runs)
    assert main(["parse", "--runs", str(logs / "ascend-qwen3coder-480b-dp4.log.gz")]) == 0
    assert "#running-req 80: median 1653.82 tok/s" in capsys.readouterr().out
    for plain in ("cli991-qwen25-3b-bs1.log.gz", "rtxpro6000-agentic-spec-bs1.log.gz"):
        assert main(["parse", str(logs / plain)]) == 0
        assert NOTE not in capsys.readouterr().out


def test_a_vllm_data_parallel_summary_says_its_rows_are_one_engines_lines(data_dir, tmp_path,
                                                                        capsys) -> None:
    """The real-format vLLM log (tests/data/vllm-logs) with a second engine's stats lines."""
    real = (data_dir / "vllm-logs" / "gen-baseline-0.11.log").read_text().splitlines()
    stats = [x for x in real if "Engine 000: Avg prompt throughput" in x]
    two = [real[0]] + [y for x in stats for y in (x, x.replace("Engine 000:", "Engine 001:"))]
    log = tmp_path / "dp.log"
    log.write_text("\n".join(two) + "\n")
    assert main(["parse", str(log)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "Data parallel: the log holds the stats lines of several engines (Engine 000, 001," \
        in out
    assert main(["parse", str(data_dir / "vllm-logs" / "gen-baseline-0.11.log")]) == 0
    assert not any(x.startswith("Data parallel") for x in capsys.readouterr().out.splitlines())
