"""Every wait on the host agent ends: a reply that never comes, an agent that goes away, and a
cancel that arrives at the moment a message does (asyncio.wait_for before Python 3.12 loses
such a cancel; that made test_one_agent hang under CPU load: the GPU consumer loop, cancelled
as a sample arrived, ran on forever).

The agents are real processes started on LocalHost; a stopped agent (SIGSTOP) is one that
answers nothing. The races are made deterministic by delivering the message and the cancel in
the same event-loop step.
"""

from __future__ import annotations

import asyncio
import os
import signal

import pytest
from kit.wait import until

from specmon.hosts.agent_client import AgentClient, AgentError, Subscription
from specmon.hosts.local import LocalHost
from specmon.sources.gpu_poll import RemoteAgentSource

BOUND = 10.0  # seconds a test waits for a task that must end; a failure, not a hang


async def test_gpu_loop_cancelled_as_a_sample_arrives_stops():
    src = RemoteAgentSource(LocalHost(), interval=0.05)
    sub = Subscription("gpu", [1], 8)
    batches: list = []

    async def consume() -> None:
        async for batch in src._agent_loop(sub):
            batches.append(batch)

    task = asyncio.create_task(consume())
    for _ in range(3):
        await asyncio.sleep(0)  # the consumer now waits for a sample
    sub.put({"t": "gpu", "stream": 1, "rec": {"ts": 1.0, "gpus": []}})
    task.cancel()  # in the same step as the sample
    done, _ = await asyncio.wait({task}, timeout=BOUND)
    assert task in done, "the cancelled GPU consumer kept running"
    assert task.cancelled()


async def test_request_cancelled_as_its_reply_arrives_is_cancelled():
    async with AgentClient(LocalHost()) as agent:
        proc = agent._proc
        assert proc is not None and agent.pid is not None
        os.kill(agent.pid, signal.SIGSTOP)  # the real reply must not race ours
        try:
            task = asyncio.create_task(agent.request("procs", timeout=BOUND))
            await until(lambda: proc._pending, what="the request to be sent")
            await asyncio.sleep(0.1)  # written: the request now awaits its reply
            (rid,) = proc._pending
            proc._route({"t": "reply", "id": rid, "ok": True, "result": []})
            task.cancel()  # in the same step as the reply
            done, _ = await asyncio.wait({task}, timeout=BOUND)
            assert task in done
            assert task.cancelled(), f"the cancel was lost: the request returned {task.result()!r}"
        finally:
            os.kill(agent.pid, signal.SIGCONT)


async def test_request_to_an_agent_that_stops_answering_times_out():
    async with AgentClient(LocalHost()) as agent:
        assert agent.pid is not None
        assert isinstance(await agent.request("procs", timeout=BOUND), list)  # it answers
        os.kill(agent.pid, signal.SIGSTOP)
        try:
            task = asyncio.create_task(agent.request("procs", timeout=0.5))
            done, _ = await asyncio.wait({task}, timeout=BOUND)
            assert task in done, "a request to a silent agent is still waiting"
            with pytest.raises(asyncio.TimeoutError):
                task.result()
        finally:
            os.kill(agent.pid, signal.SIGCONT)


async def test_request_fails_when_the_agent_goes_away():
    async with AgentClient(LocalHost()) as agent:
        assert agent.pid is not None
        os.kill(agent.pid, signal.SIGSTOP)  # it will never answer this request
        task = asyncio.create_task(agent.request("procs", timeout=None))  # no bound of its own
        await until(lambda: agent._proc is not None and agent._proc._pending,
                    what="the request to be sent")
        os.kill(agent.pid, signal.SIGKILL)  # the agent we started goes away
        done, _ = await asyncio.wait({task}, timeout=BOUND)
        assert task in done, "a request to a dead agent is still waiting"
        with pytest.raises(AgentError):
            task.result()


async def test_a_reply_failed_before_its_request_was_written_is_retrieved(monkeypatch):
    """The agent goes away while a request is still being written: its reply future is failed
    (nobody awaits it: the write failed first), and that failure is retrieved, so no
    "Future exception was never retrieved" reaches stderr at exit."""
    import gc

    loop = asyncio.get_running_loop()
    logged: list[str] = []
    old = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, ctx: logged.append(str(ctx.get("message"))))
    try:
        async with AgentClient(LocalHost()) as agent:
            proc = agent._proc
            assert proc is not None

            async def write_as_the_agent_goes(data: bytes) -> None:
                proc._shut()  # the agent went away: every pending reply fails
                raise AgentError("the agent went away")

            monkeypatch.setattr(proc, "_write", write_as_the_agent_goes)
            with pytest.raises(AgentError):
                await agent.request("procs", timeout=BOUND)
        gc.collect()
        await asyncio.sleep(0)
        assert not [m for m in logged if "never retrieved" in m], logged
    finally:
        loop.set_exception_handler(old)
