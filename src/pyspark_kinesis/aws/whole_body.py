"""Response bodies read in one call, instead of botocore's 64 KB pieces.

botocore reads a response it does not stream as `b"".join(raw.stream())`: urllib3 hands the body over
64 KB at a time, each piece read into a fresh zeroed buffer, copied out, queued and copied again, and
the join copies the whole once more. A GetRecords response holds up to 10 MB, and at the executor's
rates that was about a quarter of the Python workers' CPU (docs/performance.md, "Where the CPU goes").
One `read()` of the whole body is a single copy from the socket, about eight times less CPU per MB.

botocore has no option for it: its endpoint builds its HTTP session itself (`URLLib3Session`, not
configurable through a client's arguments). So the clients the connector builds get their endpoint's
session wrapped by `WholeBodySession`: a request botocore would read whole is sent as a streamed
one (botocore then leaves the body unread), and the body is read here, still inside the session's
`send`, so a connection that breaks mid-body is botocore's `ConnectionClosedError` or
`ReadTimeoutError` as before and botocore's retry modes handle it. A body cut short of its
Content-Length now raises instead of arriving truncated (http.client checks the length), which is
what a retry needs. When a botocore release no longer has the attribute this relies on, the client is
left as botocore made it: the bodies are read the slower way, nothing else changes.
"""

from __future__ import annotations

from typing import Any

from botocore.awsrequest import AWSResponse
from botocore.exceptions import ConnectionClosedError, HTTPClientError, ReadTimeoutError, SSLError
from botocore.httpsession import URLLib3Session
from urllib3.exceptions import ProtocolError
from urllib3.exceptions import ReadTimeoutError as URLLib3ReadTimeoutError
from urllib3.exceptions import SSLError as URLLib3SSLError


class _ReadResponse(AWSResponse):
    """botocore's response with its body already read."""

    def __init__(self, response: AWSResponse, body: bytes) -> None:
        super().__init__(response.url, response.status_code, response.headers, response.raw)
        self._body = body

    @property
    def content(self) -> bytes:
        return self._body


def read_body(raw: Any, request: Any) -> bytes:
    """The whole body of `raw` (a urllib3 response), its failures mapped as botocore's session maps
    them, so botocore's retry modes see what they would have seen."""
    try:
        return raw.read() or b""
    except URLLib3ReadTimeoutError as exc:
        raise ReadTimeoutError(endpoint_url=request.url, error=exc) from exc
    except URLLib3SSLError as exc:
        raise SSLError(endpoint_url=request.url, error=exc) from exc
    except ProtocolError as exc:  # the connection broke mid-body, or the body ended short
        raise ConnectionClosedError(error=exc, request=request, endpoint_url=request.url) from exc
    except Exception as exc:  # as botocore's session does: any other failure is an HTTP client error
        raise HTTPClientError(error=exc) from exc


class WholeBodySession:
    """A botocore HTTP session that reads each body it does not stream in one call (module docstring).
    Everything else is the wrapped session's."""

    def __init__(self, inner: URLLib3Session) -> None:
        self._inner = inner

    def send(self, request: Any) -> AWSResponse:
        if request.stream_output:  # event streams (SubscribeToShard) and streamed bodies: as botocore does
            return self._inner.send(request)
        request.stream_output = True
        try:
            response = self._inner.send(request)
        finally:
            request.stream_output = False
        return _ReadResponse(response, read_body(response.raw, request))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def read_bodies_whole(client: Any) -> bool:
    """Wrap `client`'s HTTP session in `WholeBodySession`; False (the client unchanged) when botocore's
    endpoint is not shaped as this expects."""
    endpoint: Any = getattr(client, "_endpoint", None)  # botocore's own attribute: no public way to it
    session = getattr(endpoint, "http_session", None)
    if not isinstance(session, URLLib3Session):
        return False
    endpoint.http_session = WholeBodySession(session)
    return True
