"""One bounded HTTP GET for every scrape of a server's endpoints (`counters`, the benchmark's
/metrics and /server_info reads): at most `limit` bytes of body, inflated (a 1 MB gzip body
inflating to 1 GiB reached 3.2 GB of memory; a 2 GB plain one 5.9 GB), and `deadline_s`
seconds from the request to the last byte (httpx's timeouts are per read: a server trickling a
byte every few seconds, headers included, held a read for ever)."""

from __future__ import annotations

import asyncio
import zlib
from typing import Any

READ_TIMEOUT_S = 10.0  # any one step (connect, one read)
SCRAPE_DEADLINE_S = 15.0  # one whole read of an endpoint, request to last byte


class FetchError(Exception):
    """Why a GET gave no body, in one line (the caller says where)."""


class Body:
    """A response body as it arrives, decoded (gzip, deflate or none) and counted: at most
    `limit` + 1 bytes are ever held or inflated, whatever a chunk holds (zlib's max_length
    stops it one byte past the limit)."""

    def __init__(self, encoding: str, limit: int) -> None:
        if encoding not in ("", "identity", "gzip", "x-gzip", "deflate"):
            raise ValueError(encoding)
        self.limit = limit
        self.data = bytearray()
        # (gzip, or HTTP's deflate: zlib's stream; 32 + MAX_WBITS reads either header)
        self._z = None if encoding in ("", "identity") else zlib.decompressobj(32 + zlib.MAX_WBITS)
        self._fed = False

    def feed(self, raw: bytes) -> bool:
        """False once the body is over the limit."""
        self._fed = self._fed or bool(raw)
        if self._z is None:
            self.data += raw
            return len(self.data) <= self.limit
        while raw:
            self.data += self._z.decompress(raw, self.limit + 1 - len(self.data))
            if len(self.data) > self.limit:
                return False
            raw = self._z.unconsumed_tail
        return True

    @property
    def cut_short(self) -> bool:
        """A compressed body that ended before its compressed stream did."""
        return self._z is not None and self._fed and not self._z.eof


def why(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


async def get_bounded(client: Any, url: Any, *, deadline_s: float, limit: int,
                      what: str = "body", status_ok: tuple[int, ...] = (200,)) -> tuple[int, bytes]:
    """(status, body) of GET `url`; FetchError for a status not in `status_ok` (its body is
    not read), a body over `limit` bytes (decoded; reading stops there), one not whole in
    `deadline_s`, an encoding other than gzip/deflate/none, or a failed connection."""
    import httpx

    async def get() -> tuple[int, bytes]:
        step = min(READ_TIMEOUT_S, deadline_s)
        # gzip only: the one compression prometheus_client writes, and one zlib bounds
        async with client.stream("GET", url, timeout=step,
                                 headers={"Accept-Encoding": "gzip"}) as r:
            if r.status_code not in status_ok:
                raise FetchError(f"HTTP {r.status_code}")
            said = r.headers.get("Content-Encoding", "")
            encoding = said.strip().lower()
            try:
                body = Body(encoding, limit)
            except ValueError:
                raise FetchError(f"Content-Encoding {said} not supported (gzip, deflate or "
                                 "none)") from None
            async for raw in r.aiter_raw():
                if not body.feed(raw):
                    raise FetchError(f"{what} over {limit} bytes ({encoding or 'plain'}): not "
                                     "read further")
            if body.cut_short:
                raise FetchError(f"the {encoding} body ends before its compressed data")
            return r.status_code, bytes(body.data)

    try:
        return await asyncio.wait_for(get(), deadline_s)
    except asyncio.TimeoutError:
        raise FetchError(f"no whole answer within {deadline_s:g} s (the limit of one "
                         "scrape)") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise FetchError(f"cannot fetch ({why(exc)})") from None
    except zlib.error as exc:
        raise FetchError(f"cannot decompress the body ({why(exc)})") from None
