"""`specmon counters`: engine labels, URLs, bounded scrapes and the text line, against real
local HTTP servers (http.server in a thread, in this process)."""

from __future__ import annotations

from specmon.parse.vllm_metrics import parse_vllm_metrics, windows


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
