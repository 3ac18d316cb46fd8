"""Async GPU telemetry sources: each yields one `list[GpuSample]` per poll.

- `RemoteAgentSource`: NVML samples from the host's one agent (specmon/hostside/, op
  nvml_start), pynvml found in the agent's interpreter or the server's; falls back to
  `NvidiaSmiSource` when there is no pynvml (or NVML fails in Python).
- `NvidiaSmiSource`: one long-lived `nvidia-smi --query-gpu=... -lms N`, parsed by
  `specmon.parse.gpu_sample`.
- `SimGpuSource`: reads the simulated host's GPU model (demo, tests).

Failures end the iteration with `GpuSourceError`, whose message is one line fit for the UI
("no GPUs", "NVML not available (driver not loaded?): ...", "nvidia-smi not found", ...).

`NvidiaSmiSource` runs its command through a minimal `StreamHost` (below; a Host is one,
`SubprocessStreamHost` is the local one); `RemoteAgentSource` needs a Host (the agent's channel).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import time
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Sequence
from typing import Any, Protocol

from specmon.hosts.agent_client import AgentClient, AgentError, Subscription, bounded, shielded
from specmon.hosts.base import Host, HostError
from specmon.parse.gpu_sample import (
    AgentHello,
    GpuSample,
    SmiBatcher,
    choose_smi_fields,
    classify_smi_failure,
    parse_agent_line,
    parse_smi_line,
)

NVML_UNAVAILABLE = "NVML not available (driver not loaded?)"


class GpuSourceError(RuntimeError):
    """A source cannot (or can no longer) produce samples; the message is one line."""


class StreamHost(Protocol):
    """What the GPU sources need from a host.

    `stream(argv, stdin)` runs `argv` (a program and its arguments, never a shell string; an
    SSH host quotes each element with shlex.quote), writes `stdin` to it if given and then KEEPS
    stdin open, and yields stdout lines without their newline until the program exits. Closing
    the iterator (`aclose`, leaving an `async for`) must close stdin and end the program.
    A missing program raises OSError (local) or simply yields nothing (SSH exit 127).
    """

    def stream(self, argv: list[str], stdin: bytes | None = None) -> AsyncGenerator[str, None]: ...


class SnapshotModel(Protocol):
    """The simulated host's GPU model (`specmon.sim.gpu_model.SimGpuHost`)."""

    def snapshot(self, now: float | None = None) -> list[dict[str, Any]]: ...


class SubprocessStreamHost:
    """`StreamHost` over local subprocesses; cleans up only the process it started."""

    def __init__(self, term_grace: float = 2.0) -> None:
        self.term_grace = term_grace

    async def stream(self, argv: list[str], stdin: bytes | None = None) -> AsyncGenerator[str, None]:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
            start_new_session=True,  # terminal signals meant for the TUI do not reach it
            limit=1 << 20,
        )
        try:
            if stdin is not None and proc.stdin is not None:
                proc.stdin.write(stdin)
                with contextlib.suppress(ConnectionError):
                    await proc.stdin.drain()
            assert proc.stdout is not None
            while True:
                raw = await proc.stdout.readline()
                if not raw:
                    break
                yield raw.decode("utf-8", "replace").rstrip("\r\n")
            await proc.wait()
        finally:
            await self._stop(proc)

    async def _stop(self, proc: asyncio.subprocess.Process) -> None:
        """Close stdin (the agent exits on EOF), then SIGTERM, then SIGKILL; if we are
        cancelled meanwhile, SIGKILL at once so nothing outlives the stream."""
        had_stdin = proc.stdin is not None
        if proc.stdin is not None and not proc.stdin.is_closing():
            proc.stdin.close()
        try:
            # a program without our stdin (nvidia-smi) has no reason to exit: TERM it now
            steps = (None, signal.SIGTERM, signal.SIGKILL) if had_stdin else (
                signal.SIGTERM, signal.SIGKILL)
            for sig in steps:
                if proc.returncode is not None:
                    break
                if sig is not None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.send_signal(sig)
                try:
                    await asyncio.wait_for(asyncio.shield(proc.wait()), self.term_grace)
                except asyncio.TimeoutError:
                    continue
        except BaseException:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            raise


async def _next_line(it: AsyncIterator[str], timeout: float | None) -> str | None:
    """Next line or None at end of stream; TimeoutError if nothing arrives in time."""
    try:
        return await asyncio.wait_for(it.__anext__(), timeout)
    except StopAsyncIteration:
        return None


class NvidiaSmiSource:
    """`nvidia-smi --query-gpu` streamed with `-lms`; needs only the driver on the host."""

    kind = "nvidia-smi"

    def __init__(
        self,
        host: StreamHost,
        interval: float = 1.0,
        fields: Sequence[str] | None = None,
        read_timeout: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.host = host
        self.interval = interval
        self.fields = tuple(fields) if fields else None
        self.read_timeout = read_timeout if read_timeout is not None else max(15.0, 5 * interval)
        self.clock = clock
        self.status: str | None = None

    def __aiter__(self) -> AsyncGenerator[list[GpuSample], None]:
        return self._run()

    async def _help_fields(self) -> tuple[str, ...]:
        lines: list[str] = []
        try:
            gen = self.host.stream(["nvidia-smi", "--help-query-gpu"])
            try:
                while (line := await _next_line(gen, self.read_timeout)) is not None:
                    lines.append(line)
            finally:
                await gen.aclose()
        except FileNotFoundError:
            raise GpuSourceError("nvidia-smi not found") from None
        except (OSError, asyncio.TimeoutError) as exc:
            raise GpuSourceError(f"nvidia-smi --help-query-gpu failed: {exc}") from None
        text = "\n".join(lines)
        if '"index"' not in text:
            raise GpuSourceError(classify_smi_failure(lines))
        return choose_smi_fields(text)

    async def _run(self) -> AsyncGenerator[list[GpuSample], None]:
        fields = self.fields or await self._help_fields()
        self.fields = fields
        argv = [
            "nvidia-smi",
            f"--query-gpu={','.join(fields)}",
            "--format=csv,noheader,nounits",
            "-lms",
            str(max(1, int(round(self.interval * 1000)))),
        ]
        batcher = SmiBatcher()
        bad: list[str] = []
        got_any = False
        try:
            gen = self.host.stream(argv)
        except FileNotFoundError:
            raise GpuSourceError("nvidia-smi not found") from None
        try:
            while True:
                try:
                    line = await _next_line(gen, self.read_timeout)
                except FileNotFoundError:
                    raise GpuSourceError("nvidia-smi not found") from None
                except asyncio.TimeoutError:
                    raise GpuSourceError(
                        f"nvidia-smi silent for {self.read_timeout:g} s"
                    ) from None
                if line is None:
                    break
                if not line.strip():
                    continue
                try:
                    sample = parse_smi_line(line, fields, ts=self.clock())
                except ValueError:
                    bad.append(line)
                    if not got_any and len(bad) >= 3:
                        raise GpuSourceError(classify_smi_failure(bad)) from None
                    self.status = f"skipped unparsable nvidia-smi line: {line[:80]!r}"
                    continue
                got_any = True
                batch = batcher.feed(sample)
                if batch:
                    yield batch
        finally:
            await gen.aclose()
        rest = batcher.flush()
        if rest:
            yield rest
        if not got_any:
            raise GpuSourceError(classify_smi_failure(bad))
        raise GpuSourceError("nvidia-smi exited")


class RemoteAgentSource:
    """NVML samples from the host's one agent (op nvml_start); falls back to nvidia-smi when
    pynvml/NVML is unusable there.

    `python`: the interpreter whose pynvml to use when the agent's own interpreter has none
    (usually the server's). `kind` becomes "nvml-agent" or "nvidia-smi" once started; `hello`
    holds the agent's versions; `attempts` says what was tried, one line each.
    """

    def __init__(
        self,
        host: Host,
        interval: float = 1.0,
        python: str | None = None,
        fallback_smi: bool = True,
        startup_timeout: float = 60.0,
        read_timeout: float | None = None,
        count: int = 0,
        proc_interval: float = 5.0,
        slow_interval: float = 30.0,
    ) -> None:
        self.host = host
        self.interval = interval
        self.python = python
        self.fallback_smi = fallback_smi
        self.startup_timeout = startup_timeout
        self.read_timeout = read_timeout if read_timeout is not None else max(15.0, 5 * interval)
        self.count = count
        self.proc_interval = proc_interval
        self.slow_interval = slow_interval
        self.kind: str | None = None
        self.hello: AgentHello | None = None
        self.status: str | None = None
        self.attempts: list[str] = []

    def __aiter__(self) -> AsyncGenerator[list[GpuSample], None]:
        return self._run()

    async def _run(self) -> AsyncGenerator[list[GpuSample], None]:
        label = self.python or self.host.python
        nvml_error: str | None = None
        agent = AgentClient(self.host)
        try:
            await bounded(agent.start(), self.startup_timeout)  # keeps a cancel (see bounded)
        except (HostError, asyncio.TimeoutError) as exc:
            self.attempts.append(f"{label}: {exc or 'no answer'}")
        else:
            sub = agent.subscribe("gpu")
            try:
                res = await agent.request(
                    "nvml_start", timeout=self.startup_timeout, stream=sub.keys[0],
                    interval=self.interval, python=self.python, count=self.count,
                    proc_interval=self.proc_interval, slow_interval=self.slow_interval)
                if not isinstance(res, dict):
                    raise AgentError(f"{self.host.name}: nvml_start answered {res!r:.80}")
                if "error" in res:
                    msg = str(res["error"])
                    self.attempts.append(f"{label}: {msg}")
                    if res.get("code") == "no-gpus":
                        raise GpuSourceError("no GPUs")
                    if res.get("code") != "no-pynvml":
                        nvml_error = msg.removeprefix("NVML not available: ")
                else:
                    hello = parse_agent_line(json.dumps(res.get("hello") or {}))
                    self.hello = hello if isinstance(hello, AgentHello) else None
                    self.kind = "nvml-agent"
                    async for batch in self._agent_loop(sub):
                        yield batch
                    return
            except (HostError, asyncio.TimeoutError) as exc:
                if self.kind == "nvml-agent":
                    raise GpuSourceError(f"GPU agent: {exc}") from None
                self.attempts.append(f"{label}: {exc or 'no answer'}")
            finally:
                agent.unsubscribe(sub)
                if not agent.closed.is_set():
                    with contextlib.suppress(Exception):
                        await shielded(agent.request("nvml_stop", stream=sub.keys[0], timeout=5.0))
        finally:
            with contextlib.suppress(Exception):
                await shielded(agent.close())
        if not self.fallback_smi:
            raise GpuSourceError(self._no_agent_message(nvml_error))
        self.kind = "nvidia-smi"
        smi = NvidiaSmiSource(self.host, self.interval, read_timeout=self.read_timeout)
        try:
            async for batch in smi:
                self.status = smi.status
                yield batch
        except GpuSourceError as exc:
            msg = str(exc)
            if nvml_error and (msg == "nvidia-smi not found" or msg.startswith(NVML_UNAVAILABLE)):
                raise GpuSourceError(f"{NVML_UNAVAILABLE}: {nvml_error}") from None
            if msg == "nvidia-smi not found":
                raise GpuSourceError(
                    "no Python with pynvml (nvidia-ml-py) on the host and nvidia-smi not found"
                ) from None
            raise

    def _no_agent_message(self, nvml_error: str | None) -> str:
        if nvml_error:
            return f"{NVML_UNAVAILABLE}: {nvml_error}"
        return "GPU agent could not start: " + "; ".join(self.attempts)[:300]

    async def _agent_loop(self, sub: Subscription) -> AsyncIterator[list[GpuSample]]:
        while True:
            try:
                msg = await sub.get(self.read_timeout)  # never loses a cancel (see get)
            except asyncio.TimeoutError:
                raise GpuSourceError(f"GPU agent silent for {self.read_timeout:g} s") from None
            if msg is None:
                raise GpuSourceError("GPU agent exited")
            if sub.dropped:
                self.status = f"{sub.dropped} GPU samples dropped (the consumer fell behind)"
            if msg["t"] == "gpu_end":
                if msg.get("reason") == "count":
                    return
                raise GpuSourceError(f"GPU agent: {str(msg.get('reason'))[:200]}")
            rec = msg["rec"]
            try:
                yield [GpuSample.from_agent_json(g, ts=rec.get("ts")) for g in rec["gpus"]]
            except ValueError as exc:
                self.status = str(exc)


class SimGpuSource:
    """Samples the simulated host's GPU model (a `specmon.sim.gpu_model.SimGpuHost`)."""

    kind = "sim"

    def __init__(
        self,
        model: SnapshotModel,
        interval: float = 1.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.model: SnapshotModel = model  # the caller builds it: sources never import the sim
        self.interval = interval
        self.clock = clock

    def __aiter__(self) -> AsyncGenerator[list[GpuSample], None]:
        return self._run()

    def poll(self) -> list[GpuSample]:
        """One synchronous poll (also used by tests)."""
        now = self.clock()
        snap = self.model.snapshot(now=now)
        if not snap:
            raise GpuSourceError("no GPUs")
        return [
            GpuSample.from_agent_json({"source": "sim", **d}, ts=now) for d in snap
        ]

    async def _run(self) -> AsyncGenerator[list[GpuSample], None]:
        while True:
            yield self.poll()
            await asyncio.sleep(self.interval)


GpuSource = RemoteAgentSource | NvidiaSmiSource | SimGpuSource
