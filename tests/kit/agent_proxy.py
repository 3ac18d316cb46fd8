"""A python3 stand-in that runs the real agent but corrupts its output, like a broken or
hostile host would (tests/integration/test_agent_messages.py).

Used as the host's interpreter: `agent_proxy.py -u -c BOOTSTRAP`. It starts the real Python
with the same arguments, passes stdin through, and rewrites stdout: the Nth "lines" message
(SPECMON_PROXY_NTH, default 1) is replaced by the mutation SPECMON_PROXY_MUTATION. With
SPECMON_PROXY_ONCE=FILE the mutation happens in the first run only (the file marks it done);
each run appends a line to SPECMON_PROXY_STARTS.
"""

import json
import os
import subprocess
import sys
import threading
import time


def mutate(name, msg):
    """The bad line (bytes, no newline) that replaces the good message `msg`."""
    tail = msg["tail"]
    good = msg["lines"][0]
    if name == "ino_text":
        return json.dumps(dict(msg, ino="abc")).encode()
    if name == "ino_float":
        return json.dumps(dict(msg, ino=1.5)).encode()
    if name == "no_lines":
        return json.dumps({k: v for k, v in msg.items() if k != "lines"}).encode()
    if name == "bad_b64":
        return json.dumps(dict(msg, lines=[[good[0], good[1], "x", {"b64": "!!not base64"}]])
                          ).encode()
    if name == "lone_surrogate":
        return json.dumps(dict(msg, lines=[[good[0], good[1], "\ud800 x"]])).encode()
    if name == "non_dict":
        return b"[1, 2, 3]"
    if name == "string":
        return b'"lines"'
    if name == "deep":
        return b"[" * 200000 + b"]" * 200000
    if name == "huge_line":
        return b'{"t":"lines","x":"' + b"x" * (20 << 20) + b'"}'
    if name == "nan":
        return json.dumps(dict(msg, cost=float("nan"))).encode()
    if name == "big_int":
        return json.dumps(msg).replace('"ino": ', '"ino": 1' + "0" * 5000 + "+", 1).encode()
    if name == "not_utf8":
        return b'{"t":"lines","tail":' + str(tail).encode() + b',"x":"\xff\xfe"}'
    if name == "unknown_type":
        return json.dumps({"t": "surprise", "tail": tail}).encode()
    if name == "offsets_backwards":
        return json.dumps(dict(msg, lines=[[good[1], good[0], good[2]]])).encode()
    if name == "repeat":  # a valid-looking message that repeats bytes already delivered
        return json.dumps(dict(msg, lines=[[0, good[1] - good[0], good[2]]])).encode()
    if name == "wrong_length":
        return json.dumps(dict(msg, lines=[[good[0], good[1] + 7, good[2], {"noeol": True}]])
                          ).encode()
    raise SystemExit(f"unknown mutation {name!r}")


def main():
    name = os.environ["SPECMON_PROXY_MUTATION"]
    nth = int(os.environ.get("SPECMON_PROXY_NTH", "1"))
    once = os.environ.get("SPECMON_PROXY_ONCE")
    starts = os.environ.get("SPECMON_PROXY_STARTS")
    if starts:
        with open(starts, "a") as f:
            f.write(f"{time.time():f}\n")
    active = not (once and os.path.exists(once))
    child = subprocess.Popen([sys.executable] + sys.argv[1:], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE)

    def pump_in():
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                child.stdin.write(data)
                child.stdin.flush()
        except OSError:
            pass
        try:
            child.stdin.close()
        except OSError:
            pass

    threading.Thread(target=pump_in, daemon=True).start()
    seen = 0
    out = sys.stdout.buffer
    for line in child.stdout:
        if active and b'"t":"lines"' in line:
            seen += 1
            if seen == nth:
                line = mutate(name, json.loads(line)) + b"\n"
                active = False
                if once:
                    open(once, "w").close()
        try:
            out.write(line)
            out.flush()
        except OSError:
            break
    child.wait()


if __name__ == "__main__":
    main()
