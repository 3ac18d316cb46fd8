# ruff: noqa: ANN001, ANN201, UP031
"""Stdlib-only probe run on the server's host with the server's Python (`python -c SOURCE`).

Prints one JSON object: SGLang version, which installed SGLang files differ from the wheel's
RECORD hashes (or `git status` of a source checkout), and host facts (hostname, kernel, CPU
governor). Must stay importable and runnable on any Python >= 3.8 without specmon installed.
"""

import base64
import hashlib
import json
import platform
import subprocess
import sys


def modified_files(dist_name="sglang", path=None):
    """(version, method, files): files whose sha256 differs from RECORD, or git-dirty files."""
    try:
        from importlib import metadata
    except ImportError:  # pragma: no cover - Python < 3.8
        return None, "unavailable: no importlib.metadata", None
    try:
        if path is not None:
            dists = [d for d in metadata.distributions(path=list(path))
                     if (d.metadata["Name"] or "").lower().replace("_", "-") == dist_name]
            if not dists:
                raise metadata.PackageNotFoundError(dist_name)
            dist = dists[0]
        else:
            dist = metadata.distribution(dist_name)
    except metadata.PackageNotFoundError:
        return None, "unavailable: %s not installed" % dist_name, None
    version = dist.version
    direct = dist.read_text("direct_url.json")
    if direct:
        try:
            info = json.loads(direct)
        except ValueError:
            info = {}
        if info.get("dir_info", {}).get("editable") and info.get("url", "").startswith("file://"):
            src = info["url"][len("file://"):]
            try:
                out = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no"],
                                     capture_output=True, text=True, timeout=20)
            except (OSError, subprocess.SubprocessError) as exc:
                return version, "unavailable: git (%s)" % exc, None
            if out.returncode != 0:
                return version, "unavailable: git status failed", None
            files = sorted(line[3:] for line in out.stdout.splitlines() if line.strip())
            return version, "git", files
    changed = []
    for f in dist.files or []:
        if f.hash is None or f.hash.mode != "sha256" or not str(f).endswith(".py"):
            continue
        p = f.locate()
        try:
            with open(str(p), "rb") as fh:
                digest = hashlib.sha256(fh.read()).digest()
        except OSError:
            changed.append(str(f) + " (missing)")
            continue
        if base64.urlsafe_b64encode(digest).rstrip(b"=").decode() != f.hash.value:
            changed.append(str(f))
    return version, "RECORD", sorted(changed)


def host_info():
    gov = None
    try:
        with open("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor") as fh:
            gov = fh.read().strip() or None
    except OSError:
        pass
    return {"hostname": platform.node() or None, "kernel": platform.release() or None,
            "cpu_governor": gov}


def main(argv=None):
    args = sys.argv[1:] if argv is None else argv
    name = args[0] if args else "sglang"
    version, method, files = modified_files(name)
    print(json.dumps({"version": version, "method": method, "modified_files": files,
                      "host": host_info()}))


def probe_source():
    """This module's source, to send as `python -c`."""
    with open(__file__, encoding="utf-8") as fh:
        return fh.read()


if __name__ == "__main__":
    main()
