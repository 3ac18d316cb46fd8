"""Secret redaction for everything specmon writes out: snapshots, reports, record JSONL, the
baseline store, SVG screenshots, `server start`'s env audit, and what the offline commands print
(`parse --json` rows, run args, drift causes, "conditions differ"). A leaf module, so that the
parse and analysis code that makes those texts masks them where they are made.

Snapshots get pasted into team threads, so every string in them passes through here: values of
env vars and arguments whose *names* look secret (HF_TOKEN, *_API_KEY, --api-key, *PASSWORD*),
credentials inside URLs, and well-known token shapes (hf_..., sk-..., ghp_...) wherever they
appear, including raw log lines. Names like `max_total_num_tokens` are not secrets: a name is
secret only when one of its words is (`token`, not `tokens`).
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import Any

MASK = "***REDACTED***"

# Words that make a name secret when they appear as a whole word of the name.
_SECRET_WORDS = {
    "token", "secret", "secrets", "password", "passwd", "passphrase", "pwd", "credential",
    "credentials", "apikey", "auth", "authorization", "cookie", "signature",
}
_WORD_SPLIT = re.compile(r"[^a-z0-9]+")
_RE_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")  # the boundary in accessToken

# Every pattern here runs on untrusted lines up to MAX_LINE long, so each must be linear in the
# line length: a match may start only where a run of its characters starts (a lookbehind),
# runs are possessive (`*+`) or atomic, so a failed match never re-reads what it scanned.
_NC = r"A-Za-z0-9_.\-"  # the characters of a name
# A value that is a list, tuple or dict (vLLM logs `'api_key': ['K']`; JSON `"key": ["K"]`;
# `Namespace(api_key=('K',))`): the whole container, two levels deep (`[[], 'K']`), or to the
# end of the line when it is cut. Each alternative starts with a character the others cannot,
# and every run is possessive: linear on any input.
_QUOTED = r"""'(?:[^'\\\n]++|\\.)*+'?|"(?:[^"\\\n]++|\\.)*+"?"""  # (a ']' in 'a]b' ends nothing)


def _container(o: str, c: str, depth: int) -> str:
    inner = rf"|\{o}(?:{_container(o, c, depth - 1)})" if depth > 1 else ""
    return rf"(?:[^\{o}\{c}\n\\'\"]++|\\.|{_QUOTED}{inner})*+\{c}?"


_CONTAINERS = "|".join(rf"\{o}{_container(o, c, 2)}" for o, c in ("[]", "()", "{}"))
# A name = value pair in env dumps, shell lines, Python reprs, JSON and YAML-ish text.
_RE_PAIR = re.compile(
    r"""(?<![""" + _NC + r"""])(?P<q1>['"]?)(?P<name>[A-Za-z_][""" + _NC + r"""]*+)(?P=q1)"""
    r"""(?P<sep>\s*+[=:]\s*+)"""
    r"""(?P<val>'(?:[^'\\]|\\.)*+'|"(?:[^"\\]|\\.)*+"|[^\s,;)}\]'"\[({][^\s,;)}\]'"]*+)"""
)
# ... whose value is a container: matched up to the container's start only (a name that is no
# secret, `args: {...}`, must not swallow the pairs inside it); `_mask_containers` masks the
# container of a secret name, scanning it once
_RE_PAIR_OPEN = re.compile(
    r"""(?<![""" + _NC + r"""])(?P<q1>['"]?)(?P<name>[A-Za-z_][""" + _NC + r"""]*+)(?P=q1)"""
    r"""\s*+[=:]\s*+(?=[\[({])"""
)
_RE_CONTAINER = re.compile(_CONTAINERS)
# --api-key VALUE / --api-key=VALUE / -api_key VALUE on a command line.
_RE_FLAG = re.compile(
    r"""(?<![A-Za-z0-9_\-])(?P<flag>--?(?P<name>[A-Za-z][A-Za-z0-9_\-]*+))(?P<sep>=|\s++)"""
    r"""(?P<val>'(?:[^'\\]|\\.)*+'|"(?:[^"\\]|\\.)*+"|[^\s'"]++)"""
)
# scheme://user:password@host or scheme://token@host
_RE_URL_CRED = re.compile(r"(?P<scheme>(?<![a-zA-Z0-9+.\-])[a-zA-Z][a-zA-Z0-9+.\-]*+://)"
                          r"(?P<cred>[^/\s@'\"]++)@")
# Token shapes worth catching even without a telling name (AIza...: Google API keys).
_RE_TOKEN_SHAPES = re.compile(
    r"\b(?:hf_[A-Za-z0-9]{8,}"
    r"|sk-[A-Za-z0-9_\-]{8,}"
    r"|gh[pousr]_[A-Za-z0-9]{16,}"
    r"|github_pat_[A-Za-z0-9_]{16,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{8,}"
    r"|A[KS]IA[0-9A-Z]{16}"  # AWS access keys (ASIA: temporary ones)
    r"|AIza[0-9A-Za-z_\-]{30,}"
    r"|glpat-[A-Za-z0-9_\-]{16,})"
)
# the literal starts of the shapes above: one cheap search decides whether the shapes can match
# (~5 ms a MiB; thirteen substring tests cost more on text made of their letters)
_RE_SHAPE_HINT = re.compile(r"hf_|sk-|gh[pousr]_|github_pat_|xox[abposr]-|A[KS]IA|AIza|glpat-")
_RE_BEARER = re.compile(r"(?i)\b(bearer|basic)\s++[A-Za-z0-9._~+/=\-]{8,}")
# Authorization / Proxy-Authorization header values whatever the scheme ("Token abc", "Digest")
_RE_AUTH_HEADER = re.compile(
    r"(?i)\b(?P<name>(?:proxy-)?authorization|x-api-key|api-key)(?P<q>['\"]?)(?P<sep>\s*+[:=]\s*+)"
    r"(?P<scheme>(?:bearer|basic|token|digest|apikey|key|hmac|negotiate)\s++)?"
    r"(?P<val>[^\s,;'\"]++)"
)
# a JSON Web Token anywhere: header.payload.signature, base64url, header starting {"
# (the literal comes first, its lookbehind after it: the engine then jumps from one "eyJ" to the
# next instead of trying the lookbehind at every character)
_RE_JWT = re.compile(r"eyJ(?<![A-Za-z0-9_\-]eyJ)[A-Za-z0-9_\-]{5,}+\.[A-Za-z0-9_\-]{5,}+\."
                     r"[A-Za-z0-9_\-]*+")
# URL query parameters with a secret name (?access_token=..., &api_key=..., &sig=...)
_RE_QUERY = re.compile(r"(?P<lead>[?&;](?P<name>[A-Za-z][A-Za-z0-9_.\-]*+)=)(?P<val>[^&#\s'\"<>]++)")
_AUTH_NAMES = {"authorization", "proxy-authorization"}
_AUTH_SCHEMES = {"bearer", "basic", "token", "digest", "apikey", "key", "hmac", "negotiate"}
_QUERY_SECRET = {"sig", "signature", "key", "code", "x-amz-signature", "x-amz-credential",
                 "x-amz-security-token"}
# "password hunter2", "passwd: x", "token is abc123", "api key is ..." in prose
_PROSE_SEP = (r"(?P<sep>\s*+[:=]\s++|\s++(?:is\s++|was\s++|(?=[^\s:=0-9!@#$%^&*]*+[0-9!@#$%^&*])))"
              r"(?P<val>[^\s,;'\"]{3,}+)")
_RE_PROSE = re.compile(r"(?i)\b(?P<word>password|passwd|passphrase|secret|token|api[ _-]?key)"
                       + _PROSE_SEP)
# the same on the lower-cased text (used when lower() keeps every position): no IGNORECASE and
# no leading \b, so the engine skips to the words' first letters; each word's lookbehind is \b
_RE_PROSE_LOW = re.compile(
    r"(?P<word>pass(?:word(?<!\wpassword)|wd(?<!\wpasswd)|phrase(?<!\wpassphrase))"
    r"|secret(?<!\wsecret)|token(?<!\wtoken)|api(?<!\wapi)[ _-]?key)" + _PROSE_SEP)
_PROSE_WORDS = ("passw", "passphrase", "secret", "token", "api")
# words that must occur (in the lower-cased text) for any name-based rule to mask anything
_NAME_HINTS = ("token", "secret", "passw", "passphrase", "pwd", "credential", "auth", "cookie",
               "key", "sig", "code=", "bearer")
# SGLang's counts ("#token: 900", "token usage: 0.04", "(token/s)"): no rule masks these, so
# a line whose only hint word is in them needs no name rule (decode lines, 20k a second)
_RE_COUNTS = re.compile(r"token(?: usage|/s\)|: [0-9.]++(?![^\s,;)}\]'\"]))")
# PEM private keys, whole blocks, or a BEGIN with no END in this text (a cut log line)
_RE_PEM = re.compile(
    r"-----BEGIN (?P<kind>[A-Z0-9 ]{0,40})PRIVATE KEY-----[\s\S]*?"
    r"(?:-----END (?P=kind)PRIVATE KEY-----|\Z)"
)
# a PEM key's body logged a line at a time: a long base64 word of mixed case and digits (not
# hex, not a path); a key's lines are 64 (PEM) or 70 (OpenSSH) characters of this
_RE_B64_WORD = re.compile(r"(?<![A-Za-z0-9+/=])[A-Za-z0-9+/]{40,}+={0,2}+(?![A-Za-z0-9+/=])")
# ... and its last line, shorter, padded with = (4pZRtbJmy7l2Ylgg3eJ7Bw==): only where it is a
# whole line's content after a log prefix at most (SGLang's "[time TP0] ", vLLM's "(EngineCore
# pid=1) INFO 11-20 10:00:00 [core.py:93] "), never a word inside a sentence
_RE_B64_TAIL = re.compile(r"(?m)^(?P<lead>[ \t]*+(?:\([^()\n]{0,64}+\)[ \t]++)?"
                          r"(?:[A-Z]{4,8}+[ \t]++[0-9]{2}-[0-9]{2}[ \t]++[0-9:.]{8,15}+[ \t]++)?"
                          r"(?:\[[^\]\n]{0,64}+\][ \t]++)?)"
                          r"(?P<val>[A-Za-z0-9+/]{6,}+={1,2}+)(?P<trail>[ \t]*+\r?)$")
# Slack incoming webhooks: the URL is the credential
_RE_SLACK_HOOK = re.compile(r"(?P<lead>hooks\.slack(?:-gov)?\.com/(?:services|workflows|triggers)/)"
                            r"(?P<val>[A-Za-z0-9_/\-]++)")
# curl -u user:pw, curl --user user:pw, curl -uuser:pw: the part after the first colon
# Quoted (-u 'admin:pw 12345', -u admin:"pw 1"), the password may hold spaces: the quote ends
# it, or the line; one pattern for each quote. Each has two groups (lead, value) and nothing
# outside them: `split` cuts the text into [before, lead, value, ...] in C and every third
# piece becomes the mask, no Python call per match
# The flag may close a group of curl's switches (-sSu, -fsSLu). The user name never runs over
# a '-' where a flag could start (after a character that is no name's): a scan from each
# `-u` to the end of a colon-less line cost quadratic time (a 1 MiB line of `-u}` ran for
# minutes and wedged `record`); now each scan ends where the next flag could begin.
_CURL_LEAD = r"-(?<![A-Za-z0-9_\-]-)(?:[sSLfkvinq]{0,8}+u\s*+|-user(?:=|\s++))"
_CURL_NAME = r"""(?:[^\s:'"\-]|(?<=[A-Za-z0-9_\-])-)++"""
_RE_CURL_USER = re.compile(r"(" + _CURL_LEAD + _CURL_NAME + r""":)([^\s'"]++)""")
_RE_CURL_USER_Q = {q: re.compile(f"({_CURL_LEAD}(?:{q}[^{q}:\\n]*+:|{_CURL_NAME}:{q}))"
                                 f"([^{q}\\n]++)") for q in "'\""}
# sshpass -p PASSWORD (only on lines that name sshpass); a value never starts with '-'
_RE_SSHPASS = re.compile(r"(-p(?<![A-Za-z0-9_\-]-p)\s*+)([^\s'\"\-][^\s'\"]*+)")
# a curl flag word that takes user:password as the next argv word (-u, --user, -sSu)
_RE_CURL_FLAG = re.compile(r"-[sSLfkvinq]{0,8}u|--user")
# NCCL's "NCCL_IB_PASSWORD set by environment to X" (and the CUDA/TORCH ones it prints alike)
_RE_SET_BY_ENV = re.compile(r"(?<![A-Za-z0-9_])(?P<name>[A-Za-z_][A-Za-z0-9_]*+)"
                            r"(?P<sep> set by environment to )(?P<val>[^\s'\"]++)")
# mysql -pPASSWORD (the password glued to -p); only on lines that name a MySQL client.
# -p'pw' and -p"pw" too, the quotes kept around the mask; -p alone (a prompt) is no value. One
# pattern a form, each starting with its literal (the engine jumps between them) and replaced
# by a plain string (no Python call per match)
_RE_MYSQL_P = re.compile(r"-p(?<![A-Za-z0-9_\-]-p)[^\s'\"-][^\s'\"]*+")
_RE_MYSQL_P1 = re.compile(r"-p'(?<![A-Za-z0-9_\-]-p')[^'\n]++")
_RE_MYSQL_P2 = re.compile(r'-p"(?<![A-Za-z0-9_\-]-p")[^"\n]++')
_MYSQL_WORDS = ("mysql", "mariadb")


def _has_digit(text: str) -> bool:
    return any(d in text for d in "0123456789")  # ten memchr-speed scans: cheaper than [0-9]


def _mixed(text: str) -> bool:
    """Upper case, lower case and a digit, all three (each a C-speed scan; for ASCII words
    exact, for other text a superset: a rule gated on it may run for nothing, never miss)."""
    return text.lower() != text and text.upper() != text and _has_digit(text)


def _b64_secret(m: re.Match[str]) -> str:
    """A long base64 word is a key body unless it looks like a hash (hex) or a path."""
    word = m.group(0)
    if word.startswith("/") or word.count("/") >= 4:
        return word
    return MASK if _mixed(word) else word


def _b64_tail(m: re.Match[str]) -> str:
    """A short padded base64 line (a key body's last line) unless it is one plain word: its
    length with the padding is a multiple of 4, and it mixes two of upper, lower, digits, +/."""
    val = m.group("val")
    if len(val) % 4:
        return m.group(0)
    kinds = (val.lower() != val) + (val.upper() != val) + _has_digit(val) + \
        ("+" in val or "/" in val)
    return f"{m.group('lead')}{MASK}{m.group('trail')}" if kinds >= 2 else m.group(0)


def is_secret_name(name: str) -> bool:
    """True for names like HF_TOKEN, OPENAI_API_KEY, --api-key, db_password, AWS_SECRET_ACCESS_KEY."""
    # names repeat, so they are cached; a name from a hostile line may be a megabyte: not those
    return _secret_name_cached(name) if len(name) <= 256 else _secret_name(name)


@lru_cache(maxsize=8192)
def _secret_name_cached(name: str) -> bool:
    return _secret_name(name)


def _secret_name(name: str) -> bool:
    name = name.strip().strip("-")
    low = name.lower()
    # camelCase words are words too: accessToken, openaiApiKey, privateKey
    words = [w for w in _WORD_SPLIT.split(_RE_CAMEL.sub("_", name).lower()) if w]
    if not words:
        return False
    if any(w in _SECRET_WORDS for w in words):
        return True
    if "password" in low or "passwd" in low or "secret" in low:  # MYPASSWORD, DBSECRET
        return True
    if low.endswith(("token", "apikey")):  # HFTOKEN, OPENAIAPIKEY (not MAXTOKENS)
        return True
    # *_KEY / api-key / access_key / private_key; a bare "key" alone is too common to mean secret
    return words[-1] in ("key", "keys") and len(words) >= 2


_RE_PLAIN_NUMBER = re.compile(r"[+-]?\d+(?:\.\d+)?%?\Z")
_KEEP = {"", "None", "null", "True", "False", "true", "false"}


def _mask_value(val: str) -> str:
    """The mask, except for values that cannot be secrets (numbers, None, booleans): a log's
    `#token: 900` and `#new-token: 512` are counts, not credentials."""
    if val in _KEEP or _RE_PLAIN_NUMBER.match(val):
        return val
    if val[:1] in "'\"" and val[-1:] == val[:1] and len(val) >= 2:
        inner = val[1:-1]
        return val if inner in _KEEP else f"{val[0]}{MASK}{val[0]}"
    return MASK


# a terminal escape sequence (CSI colour codes, OSC titles, two-byte ESC forms): a log's colour
# code glued to a secret ("\x1b[32mhf_...") hides the secret's start from the word checks
# (and the one-byte C1 CSI, "\x9b31m", which a terminal reads as ESC [)
_RE_ESC = re.compile(r"(\x1b(?:\[[0-?]*+[ -/]*+[@-~]?|\][^\x07\x1b]*+(?:\x07|\x1b\\)?|[ -/]*+[0-~]?)"
                     r"|\x9b[0-?]*+[ -/]*+[@-~]?)")


def redact_text(text: str) -> str:
    """Every secret in a free text (log line, command line, URL) replaced by the mask. Escape
    sequences stay as they are; the text between them is redacted piece by piece."""
    if not text:
        return text
    if "\x1b" in text or "\x9b" in text:
        parts = _RE_ESC.split(text)  # text, escape, text, ...
        parts[::2] = map(_redact_plain, parts[::2])
        return "".join(parts)
    return _redact_plain(text)


# Tests' view of the cost: when a list, each regex pass over the text appends its name (the
# pre-checks before the passes are substring tests, no regex)
_TRACE: list[str] | None = None


def _sub(name: str, pat: re.Pattern[str], repl: Any, text: str) -> str:
    if _TRACE is not None:
        _TRACE.append(name)
    return pat.sub(repl, text)


def redaction_passes(text: str) -> list[str]:
    """The regex passes `redact_text(text)` runs, in order (what the cost test asserts on: a
    pass is a scan of the whole text, ~10-20 ms a MiB; everything else is substring tests)."""
    global _TRACE
    _TRACE = []
    try:
        redact_text(text)
        return _TRACE
    finally:
        _TRACE = None


def _mask_second(pat: re.Pattern[str], text: str, name: str) -> str:
    """`pat` (two groups: a lead, then a value) with every value masked, the leads kept."""
    if _TRACE is not None:
        _TRACE.append(name)
    parts = pat.split(text)  # [text, lead, value, text, lead, value, ..., text]
    if len(parts) == 1:
        return text
    parts[2::3] = [MASK] * (len(parts) // 3)
    return "".join(parts)


def _has_space(text: str) -> bool:
    return text.split(None, 1) != [text]  # any whitespace \s matches (str.split's own set)


def _redact_plain(text: str) -> str:
    if not text:
        return text

    def pair(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("name")):
            return m.group(0)
        if m.group("val") == MASK or (m.group("name").lower() in _AUTH_NAMES
                                      and m.group("val").lower() in _AUTH_SCHEMES):
            return m.group(0)  # "Authorization: Token ***": the scheme is no secret
        q = m.group("q1")
        return f"{q}{m.group('name')}{q}{m.group('sep')}{_mask_value(m.group('val'))}"

    def flag(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("name")):
            return m.group(0)
        return f"{m.group('flag')}{m.group('sep')}{_mask_value(m.group('val'))}"

    def query(m: re.Match[str]) -> str:
        name = m.group("name").lower()
        if is_secret_name(name) or name in _QUERY_SECRET:
            return f"{m.group('lead')}{_mask_value(m.group('val'))}"
        return m.group(0)

    def auth(m: re.Match[str]) -> str:
        return (f"{m.group('name')}{m.group('q')}{m.group('sep')}{m.group('scheme') or ''}"
                f"{MASK}")

    def env(m: re.Match[str]) -> str:
        if not is_secret_name(m.group("name")):
            return m.group(0)
        val = m.group("val")
        core = val.rstrip(".")  # NCCL ends an integer param with "."
        return f"{m.group('name')}{m.group('sep')}{_mask_value(core)}{val[len(core):]}"

    out = text
    if "PRIVATE KEY-----" in out:
        out = _sub("pem", _RE_PEM,
                   lambda m: f"-----BEGIN {m.group('kind')}PRIVATE KEY----- {MASK}", out)
    # each rule runs only when the cheap test of what it needs passes (substring tests at memchr
    # speed): a decode line, or a MiB of name characters, costs few or no regex passes
    if "://" in out and "@" in out:
        out = _sub("url_cred", _RE_URL_CRED, lambda m: f"{m.group('scheme')}{MASK}@", out)
    if "hooks.slack" in out:
        out = _sub("slack", _RE_SLACK_HOOK, lambda m: f"{m.group('lead')}{MASK}", out)
    if "-u" in out or "--user" in out or "curl" in out:  # (curl -sSu: a grouped flag)
        out = _mask_second(_RE_CURL_USER, out, "curl_user")
        for q, pat in _RE_CURL_USER_Q.items():
            if q in out:
                out = _mask_second(pat, out, f"curl_user{q}")
    if "-p" in out:
        if "sshpass" in out:
            out = _mask_second(_RE_SSHPASS, out, "sshpass")
        low = out.lower()
        if any(w in low for w in _MYSQL_WORDS):
            out = _sub("mysql_p", _RE_MYSQL_P, "-p" + MASK, out)
            if "-p'" in out:
                out = _sub("mysql_p'", _RE_MYSQL_P1, "-p'" + MASK, out)
            if '-p"' in out:
                out = _sub('mysql_p"', _RE_MYSQL_P2, '-p"' + MASK, out)
    if "eyJ" in out:
        out = _sub("jwt", _RE_JWT, MASK, out)
    if _RE_SHAPE_HINT.search(out):
        out = _sub("token_shapes", _RE_TOKEN_SHAPES, MASK, out)
    if len(out) >= 40 and _mixed(out):  # a key body mixes upper, lower and digits
        out = _sub("b64_word", _RE_B64_WORD, _b64_secret, out)
    if "=" in out:
        if "\n" in out:
            out = _sub("b64_tail", _RE_B64_TAIL, _b64_tail, out)
        elif m := _RE_B64_TAIL.match(out):  # one line: only its start can be a line's start
            out = _b64_tail(m) + out[m.end():]
    low = out.lower()
    bare = _RE_COUNTS.sub("", low) if "token" in low else low
    if not any(w in bare for w in _NAME_HINTS):
        return out  # no name-based rule can mask anything
    eq, colon = "=" in out, ":" in out
    space = _has_space(out)
    if ("authorization" in low or "api-key" in low) and (eq or colon):
        out = _sub("auth_header", _RE_AUTH_HEADER, auth, out)
    if ("bearer" in low or "basic" in low) and space:
        out = _sub("bearer", _RE_BEARER, lambda m: f"{m.group(1)} {MASK}", out)
    if eq and ("?" in out or "&" in out or ";" in out):
        out = _sub("query", _RE_QUERY, query, out)
    if " set by environment to " in out:
        out = _sub("set_by_env", _RE_SET_BY_ENV, env, out)
    if (space or eq or colon) and any(w in bare for w in _PROSE_WORDS):
        out = _prose(out)
    if eq or colon:  # a pair's separator
        if "[" in out or "(" in out or "{" in out:
            out = _mask_containers(out)
        out = _sub("pair", _RE_PAIR, pair, out)
    if "-" in out and (eq or space):  # --flag=VALUE / --flag VALUE
        out = _sub("flag", _RE_FLAG, flag, out)
    return out


def _mask_containers(text: str) -> str:
    """Each list, tuple or dict that is the value of a secret name, masked whole; the pairs
    inside another name's container are left to the pair rule. Python runs only per
    `name: [` (not per pair), and a masked container is scanned once."""
    if _TRACE is not None:
        _TRACE.append("containers")
    parts: list[str] = []
    last = 0
    for m in _RE_PAIR_OPEN.finditer(text):
        if m.start() < last or not is_secret_name(m.group("name")):
            continue  # (inside a container masked already)
        c = _RE_CONTAINER.match(text, m.end())
        if c is None:  # (cannot be: the lookahead saw its opening character)
            continue
        parts += (text[last:m.end()], MASK)
        last = c.end()
    if not parts:
        return text
    parts.append(text[last:])
    return "".join(parts)


def _prose_value(val: str) -> bool:
    """Whether a prose rule's value is one to mask ("token usage: 0.04", "#token: 900" are
    counts)."""
    return not (_RE_PLAIN_NUMBER.match(val) or val in _KEEP or val == MASK)


def _prose_sub(m: re.Match[str]) -> str:
    if not _prose_value(m.group("val")):
        return m.group(0)
    return f"{m.group('word')}{m.group('sep')}{MASK}"


def _prose(out: str) -> str:
    """"password X" / "token is X": on the lower-cased text where lower() keeps every
    position (a case-blind regex tries every character, ~4x the cost), else case-blind."""
    low = out.lower()
    if len(low) != len(out):  # a character whose lower case is longer (İ): positions move
        return _sub("prose", _RE_PROSE, _prose_sub, out)
    if _TRACE is not None:
        _TRACE.append("prose")
    parts: list[str] = []
    last = 0
    for m in _RE_PROSE_LOW.finditer(low):
        start, end = m.span()
        if not _prose_value(out[m.start("val"):end]):
            continue
        parts += (out[last:start], out[start:m.end("sep")], MASK)
        last = end
    if not parts:
        return out
    parts.append(out[last:])
    return "".join(parts)


_RE_SVG_TEXT = re.compile(r"(<text\b[^>]*>)([^<]*)(</text>)")


def redact_svg(svg: str) -> str:
    """An SVG screenshot (Rich's export: one <text> per styled run, spaces as &#160;) with
    every run's text redacted. Secrets split across two differently styled runs of one row
    are caught by redacting each row's joined text too and masking the runs that hold it."""
    import html

    def one(m: re.Match[str]) -> str:
        raw = html.unescape(m.group(2)).replace("\xa0", " ")
        red = redact_text(raw)
        if red == raw:
            return m.group(0)
        return m.group(1) + html.escape(red, quote=False).replace(" ", "&#160;") + m.group(3)

    return _RE_SVG_TEXT.sub(one, svg)


def redact_fingerprint(fp: Any) -> Any:
    """A fingerprint object (to_json/from_json) with every secret in it masked."""
    if fp is None:
        return None
    return type(fp).from_json(redact_obj(fp.to_json()))


_NUMBERS = (int, float, bool)


def redact_obj(obj: Any, *, key: str | None = None) -> Any:
    """A JSON-like tree with every secret masked: values under secret-looking keys, and any
    secret inside any string (keys included)."""
    if isinstance(obj, dict):  # (a number or None is kept under any key: no call for it)
        out = {_redact_key(str(k)) if len(str(k)) <= 256 else redact_text(str(k)):
               v if v is None or type(v) in _NUMBERS else redact_obj(v, key=str(k))
               for k, v in obj.items()}
        # {"var": "NCCL_IB_PASSWORD", "value": ...} (an nccl_env record), {"name": ..., "value": ...}
        for tag in ("var", "name"):
            named = obj.get(tag)
            if isinstance(named, str) and "value" in out and is_secret_name(named):
                out["value"] = redact_obj(out["value"], key=named)
        return out
    if isinstance(obj, list | tuple):
        if key is not None and is_secret_name(key):
            return [MASK if x not in (None, "") else x for x in obj]
        if obj and all(isinstance(x, str) for x in obj):
            return redact_argv(list(obj))  # a command line: the word after --api-key too
        return [redact_obj(x) for x in obj]
    if key is not None and is_secret_name(key) and obj not in (None, "") \
            and not isinstance(obj, bool | int | float):
        return MASK
    if isinstance(obj, str):
        return redact_text(obj)
    return obj


@lru_cache(maxsize=4096)
def _redact_key(key: str) -> str:
    """Keys repeat (every record has the same ones): redact each distinct key once."""
    return redact_text(key)


def redact_argv(argv: list[str]) -> list[str]:
    """A command line given as a list: the word after a secret flag is masked too."""
    out: list[str] = []
    mask_next = user_next = False
    sshpass = any(w.rsplit("/", 1)[-1] == "sshpass" for w in argv[:1])
    for word in argv:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        if user_next and ":" in word:  # curl -u user:password: the user is kept
            out.append(word.split(":", 1)[0] + ":" + MASK)
            user_next = False
            continue
        user_next = False
        if word.startswith("-") and "=" not in word and (
                is_secret_name(word) or (sshpass and word == "-p")):
            out.append(word)
            mask_next = True
            continue
        if _RE_CURL_FLAG.fullmatch(word):
            user_next = True
        out.append(redact_text(word))
    return out
