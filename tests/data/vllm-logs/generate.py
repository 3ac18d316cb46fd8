"""Generate synthetic vLLM 0.11 logs (F3 layout) from vLLM's format strings: spec + baseline."""
import random
random.seed(7)
HEAD = "(APIServer pid=%d) INFO 11-20 %02d:%02d:%02d [%s:%d] "
ENG = ("Engine %03d: Avg prompt throughput: %.1f tokens/s, Avg generation throughput: %.1f tokens/s, "
       "Running: %d reqs, Waiting: %d reqs, GPU KV cache usage: %.1f%%, Prefix cache hit rate: %.1f%%")
F3 = ("SpecDecoding metrics: Mean acceptance length: %.2f, Accepted throughput: %.2f tokens/s, "
      "Drafted throughput: %.2f tokens/s, Accepted: %d tokens, Drafted: %d tokens, "
      "Per-position acceptance rate: %s, Avg Draft acceptance rate: %.1f%%")
CFG = ("(EngineCore_DP0 pid=%d) INFO 11-20 10:00:00 [core.py:93] Initializing a V1 LLM engine (v0.11.0) "
       "with config: model='Qwen/Qwen3-8B', speculative_config=%s, tokenizer='Qwen/Qwen3-8B', "
       "skip_tokenizer_init=False, tensor_parallel_size=1, pipeline_parallel_size=1, data_parallel_size=1, "
       "enable_prefix_caching=True")
def clock(t):
    return (10 + t // 3600) % 24, (t // 60) % 60, t % 60
def log(spec, path, n=40, base_tps=1000.0, pid=100):
    out = []
    sc = "SpeculativeConfig(method='eagle3', model='org/Qwen3-8B-eagle3', num_spec_tokens=3)" if spec else "None"
    out.append(CFG % (pid + 1, sc))
    t = 30
    for i in range(n):
        if i == 20:
            t += 300  # idle: nothing printed (0.8.5+)
        rr = 16
        pp = [0.80 + random.uniform(-0.02, 0.02), 0.60 + random.uniform(-0.02, 0.02), 0.42 + random.uniform(-0.02, 0.02)]
        drafts = random.randint(2800, 3200) if spec else 0
        acc = int(round(drafts * sum(pp)))
        gen = (acc + drafts) / 10.0 if spec else base_tps * random.uniform(0.97, 1.03) / 10.0 * 4.0
        h = HEAD % ((pid,) + clock(t) + ("loggers.py", 127))
        out.append(h + ENG % (0, 0.0, gen, rr, 0, 20.0 + i * 0.1, 50.0))
        if spec:
            gap = 10.0 if i != 20 else 310.0  # the 0.10.2+ quirk: last_log_time not reset while idle
            h2 = HEAD % ((pid,) + clock(t) + ("metrics.py", 96))
            ppr = [round(x * 1000) / 1000 for x in pp]
            out.append(h2 + F3 % (1 + acc / drafts, acc / gap, 3 * drafts / gap, acc, 3 * drafts,
                                  ", ".join("%.3f" % x for x in ppr), 100.0 * acc / (3 * drafts)))
        if i % 7 == 3:
            out.append("(APIServer pid=%d) INFO:     127.0.0.1:5555 - \"POST /v1/completions HTTP/1.1\" 200 OK" % pid)
        t += 10
    open(path, "w").write("\n".join(out) + "\n")
log(True, "tests/data/vllm-logs/gen-eagle3-0.11.log")
log(False, "tests/data/vllm-logs/gen-baseline-0.11.log", pid=200)
