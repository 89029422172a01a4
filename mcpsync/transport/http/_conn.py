"""Low-level helpers of the HTTP transport: our own ``requests.Session``, aborting a request
from another thread, and reading bodies and streams without buffering past a limit.

Why a tracked connection class: a cancelled request must be torn down even *before* its response
headers arrive (docs/http.md, "Modern servers (2026-07-28)"), but ``requests`` blocks in
``getresponse()`` and offers no handle on the socket until it returns. Our own session mounts an
adapter whose urllib3 pools build :class:`_TrackedHTTPConnection`; each one announces itself to
the :class:`Abortable` the sending thread registered (a thread-local), so the cancelling thread
can ``shutdown()`` that socket, which wakes the blocked read at once. A caller's own session is
never remounted: there a request is aborted once its headers arrive (documented).
"""

from __future__ import annotations

import contextlib
import http.client
import socket
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.cookiejar import CookieJar
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, cast

import requests
import urllib3.exceptions
from requests import cookies as _cookies, sessions as _sessions
from requests.adapters import HTTPAdapter
from requests.cookies import RequestsCookieJar
from requests.models import PreparedRequest
from requests.structures import CaseInsensitiveDict
from requests.utils import get_netrc_auth
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

from mcpsync.errors import ConnectFailed, ConnectionLost, MCPError, TransportError
from mcpsync.transport.http._auth import redact_url

if TYPE_CHECKING:
    from requests.adapters import _HostParams, _PoolKwargs
    from requests.sessions import _Settings

__all__ = ["MAX_WORKERS", "NETWORK_ERRORS", "POOL_MAXSIZE", "Abortable", "Described",
           "abort_socket", "close_session", "connect_failure", "from_network", "iter_chunks",
           "map_network_errors", "media_type", "new_session", "read_body", "tracking"]

MAX_WORKERS: Final = 64   # requests in flight at once: the transport's worker threads
# Connections kept per origin: one per worker, plus the long-lived streams that run on
# threads of their own (the legacy GET stream or the HTTP+SSE stream, and the modern
# ``subscriptions/listen`` stream). Smaller than that, 64 calls at once while a stream is
# open need one connection more than the pool keeps: urllib3 opens it and drops it on
# return, over and over.
POOL_MAXSIZE: Final = MAX_WORKERS + 2
READ1_SIZE = 65536
ENV_TTL = 1.0   # seconds between two reads of the environment's proxy/CA settings
# Entries each per-URL cache of our session and adapter holds at most (redirect targets and
# many servers add URLs): a full cache starts over.
CACHE_MAX: Final = 64

# What ``requests``, urllib3 and the socket layer raise when the network fails; only
# :func:`map_network_errors` catches these, and turns them into mcpsync errors.
NETWORK_ERRORS: Final = (requests.RequestException, urllib3.exceptions.HTTPError, OSError,
                         http.client.HTTPException)

_tls = threading.local()
_T = TypeVar("_T")

# The helpers Session.prepare_request uses (untyped in the stubs, so typed loosely here).
_cookiejar_from_dict: Callable[..., CookieJar] = _cookies.cookiejar_from_dict
_merge_cookies: Callable[..., CookieJar] = _cookies.merge_cookies
_merge_setting: Callable[..., Any] = _sessions.merge_setting
_merge_hooks: Callable[..., Any] = _sessions.merge_hooks


def _kept(cache: dict[Any, tuple[float, _T]], key: Any, compute: Callable[[], _T]) -> _T:
    """``compute()``, kept in ``cache`` under ``key`` for ENV_TTL seconds (the per-URL caches
    of our session and adapter); a cache that holds CACHE_MAX entries starts over."""
    now = time.monotonic()
    hit = cache.get(key)
    if hit is None or now - hit[0] > ENV_TTL:
        if len(cache) >= CACHE_MAX:   # many URLs (redirect targets, many servers)
            cache.clear()
        cache[key] = hit = (now, compute())
    return hit[1]


class Abortable:
    """One in-flight HTTP request that another thread may abort.

    ``conn`` is the urllib3 connection (set by the tracked connection class when the request
    is written); ``response`` the ``requests.Response`` once its headers arrived.
    """

    __slots__ = ("aborted", "conn", "response")

    def __init__(self) -> None:
        self.aborted = False
        self.conn: Any = None
        self.response: requests.Response | None = None

    def abort(self) -> None:
        """Tear the request down for good: its reader (in another thread) sees an error or
        EOF, and nothing more is sent for it."""
        self.aborted = True
        self.shutdown()

    def shutdown(self) -> None:
        """Shut the current connection down (the watchdog: the stream counts as dropped).

        Once the response headers arrived, only the response's own socket is touched: the
        connection object (``conn``) goes back to the pool when that stream ends and may
        already carry another request (a GET stream reopened at once), whose socket is not
        ours to shut. Before the headers, ``conn`` is the request's.
        """
        response = self.response
        if response is not None:
            raw = getattr(response, "raw", None)
            conn = getattr(raw, "_connection", None) or getattr(raw, "connection", None)
            if conn is not None:
                abort_socket(getattr(conn, "sock", None))
            else:
                fp = getattr(getattr(raw, "_fp", None), "fp", None)
                abort_socket(getattr(getattr(fp, "raw", None), "_sock", None))
            return
        conn = self.conn
        if conn is not None:
            abort_socket(getattr(conn, "sock", None))


def abort_socket(sock: Any) -> None:
    """``shutdown(SHUT_RDWR)``: unlike ``close()``, it wakes a thread blocked reading it."""
    if sock is None:
        return
    with contextlib.suppress(OSError, AttributeError, ValueError):
        sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def tracking(target: Abortable) -> Iterator[None]:
    """While sending on this thread, connections announce themselves to ``target``."""
    previous = getattr(_tls, "target", None)
    _tls.target = target
    try:
        yield
    finally:
        _tls.target = previous


def _announce(conn: Any) -> None:
    target: Abortable | None = getattr(_tls, "target", None)
    if target is not None:
        target.conn = conn
        if target.aborted:
            raise requests.ConnectionError("the request was cancelled")


class _TrackedHTTPConnection(HTTPConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:
        _announce(self)
        super().request(*args, **kwargs)


class _TrackedHTTPSConnection(HTTPSConnection):
    def request(self, *args: Any, **kwargs: Any) -> None:
        _announce(self)
        super().request(*args, **kwargs)


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _TrackingAdapter(HTTPAdapter):
    """Our pools' connections can be aborted (see :func:`tracking`); the pool key of a
    request is kept for ENV_TTL seconds (see :meth:`build_connection_pool_key_attributes`)."""

    _key_cache: dict[tuple[Any, ...], tuple[float, tuple[_HostParams, _PoolKwargs]]]

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _TrackedHTTPPool,
                                                   "https": _TrackedHTTPSPool}
        # Here, not in __init__: unpickling calls this and not __init__. A new pool
        # manager may have another SSL context, on which the pool key depends.
        self._key_cache = {}

    def build_connection_pool_key_attributes(
            self, request: PreparedRequest, verify: Any,
            cert: Any = None) -> tuple[_HostParams, _PoolKwargs]:
        """``requests``' pool key for the request, kept per URL, ``verify`` and ``cert`` for
        ENV_TTL seconds.

        Why: with a CA bundle given as a path (``REQUESTS_CA_BUNDLE``, ``CURL_CA_BUNDLE``,
        which many images set), ``requests`` asks the file system whether that path is a
        directory on every request, for plain ``http://`` too: a ``stat`` system call, and
        with many threads each system call also hands the GIL over. The answer depends only
        on these arguments, the pool manager's SSL context and that path, so a CA path
        that becomes a directory at run time is still seen, within that delay. This saves
        the ``stat`` for ``http://`` only: for ``https://``, ``HTTPAdapter.cert_verify``
        still checks the path (``os.path.exists``, ``os.path.isdir``) on every request.
        """
        build = super().build_connection_pool_key_attributes
        key = (request.url, verify, cert)
        try:
            hash(key)
        except TypeError:   # an unhashable cert (a list): not kept
            return build(request, verify, cert)
        host, pool = _kept(self._key_cache, key, lambda: build(request, verify, cert))
        return host.copy(), pool.copy()   # urllib3 may add to them: never share


def _has_authorization(headers: Any) -> bool:
    """Whether merged headers carry an ``Authorization`` header (any case, str or bytes)."""
    if not isinstance(headers, Mapping):
        return False
    if "authorization" in headers:   # a CaseInsensitiveDict with str names: the usual case
        return True
    for name in headers:
        if isinstance(name, bytes):
            name = name.decode("latin-1")
        if isinstance(name, str) and name.lower() == "authorization":
            return True
    return False


class _OwnSession(requests.Session):
    """Our session, which re-reads the environment's settings at most every ENV_TTL seconds
    and prepares a request without ``requests``' slowest generic steps.

    ``requests`` scans the whole ``os.environ`` (``*_proxy``, ``no_proxy``, the CA-bundle
    variables) on every request: with a typical environment that is the largest single CPU
    cost of a small POST. The merged settings depend only on the URL, the per-call
    arguments and the environment, so they are kept per URL for ENV_TTL seconds: a proxy
    variable changed at run time is still honoured, within that delay. The same holds for
    the ``~/.netrc`` lookup of :meth:`prepare_request`.
    """

    def __init__(self) -> None:
        super().__init__()
        self._env_cache: dict[tuple[Any, ...], tuple[float, _Settings]] = {}
        self._netrc_cache: dict[Any, tuple[float, Any]] = {}

    def __setstate__(self, state: dict[str, Any]) -> None:
        """Unpickled (``requests`` pickles only its own attributes): the caches start empty."""
        super().__setstate__(state)  # type: ignore[misc]  # not in the stubs
        self._env_cache = {}
        self._netrc_cache = {}

    def prepare_request(self, request: requests.Request) -> PreparedRequest:
        """``requests.Session.prepare_request``, step for step, with the same result (but
        for the one difference below) and three of its costs cut (about half its CPU for a
        small POST, measured in docs/performance.md).

        - Headers: two plain mappings are merged directly. ``requests`` turns each into a
          list of pairs first, testing it against a runtime-checkable ``Protocol``, which
          costs microseconds per test on Python 3.11 (five tests in
          ``Session.prepare_request``, seven in a whole ``Session.request``).
        - Query parameters: when neither the request nor the session has any, ``None`` is
          prepared, which yields the same URL without three more of those tests.
        - ``~/.netrc``: looked up (an ``expanduser``, a ``stat`` per candidate file, and a
          parse when one exists) at most every ENV_TTL seconds per URL, not per request.

        One deliberate difference: ``~/.netrc`` credentials are not applied when the merged
        headers already carry an ``Authorization`` header (the transport sends its bearer
        token that way). ``requests`` would replace that header with the ``.netrc``
        entry's Basic credentials, so a user's own token never reached the server.

        Anything else (auth, cookies, hooks, files, a body) goes through the same
        ``requests`` functions as in ``Session.prepare_request``.
        """
        url = request.url
        cookies = request.cookies or {}
        if not isinstance(cookies, CookieJar):
            cookies = _cookiejar_from_dict(cookies)
        merged_cookies = _merge_cookies(_merge_cookies(RequestsCookieJar(), self.cookies),
                                        cookies)
        headers: Any
        mine, theirs = request.headers, self.headers
        if isinstance(mine, Mapping) and isinstance(theirs, Mapping):
            headers = CaseInsensitiveDict(theirs)
            headers.update(mine)
            for key in [k for k, v in headers.items() if v is None]:
                del headers[key]
        else:
            headers = _merge_setting(mine, theirs, dict_class=CaseInsensitiveDict)
        auth = request.auth
        if self.trust_env and not auth and not self.auth and not _has_authorization(headers):
            auth = self._netrc_auth(url)
        params = None if not request.params and not self.params \
            else _merge_setting(request.params, self.params)
        prepared = PreparedRequest()
        prepared.prepare(method=cast(str, request.method).upper(), url=url, files=request.files,
                         data=request.data, json=request.json, headers=headers,
                         params=params, auth=_merge_setting(auth, self.auth),
                         cookies=merged_cookies, hooks=_merge_hooks(request.hooks, self.hooks))
        return prepared

    def _netrc_auth(self, url: Any) -> Any:
        """``get_netrc_auth(url)``, kept per URL for ENV_TTL seconds."""
        return _kept(self._netrc_cache, url, lambda: get_netrc_auth(url))

    def merge_environment_settings(self, url: Any, proxies: Any, stream: Any, verify: Any,
                                   cert: Any) -> _Settings:
        if proxies:   # explicit per-call proxies: nothing to cache
            return super().merge_environment_settings(url, proxies, stream, verify, cert)
        merge = super().merge_environment_settings
        cached = _kept(self._env_cache, (url, stream, verify, cert, self.trust_env),
                       lambda: merge(url, {}, stream, verify, cert))
        fresh = cached.copy()   # requests may add to the proxies: never share the dict
        fresh["proxies"] = dict(cached["proxies"])
        return fresh


def new_session() -> requests.Session:
    """Our own session: a pool with a connection per worker and stream (POOL_MAXSIZE), whose
    connections can be aborted early."""
    session = _OwnSession()
    adapter = _TrackingAdapter(pool_connections=4, pool_maxsize=POOL_MAXSIZE)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def connect_failure(exc: BaseException) -> str | None:
    """Why no connection could be made ("connection refused", ...), or None when ``exc`` is
    not such a failure (the request may then have reached the server).

    Why here: ``requests`` wraps the cause three deep (``ConnectionError`` around urllib3's
    ``MaxRetryError`` around ``NewConnectionError`` around the ``OSError``), and their texts
    name our private pool and connection classes; callers want the plain reason.
    """
    found: BaseException | None = None
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, (urllib3.exceptions.NewConnectionError,
                             urllib3.exceptions.ConnectTimeoutError, requests.ConnectTimeout,
                             ConnectionRefusedError, socket.gaierror)):
            found = item if found is None or isinstance(item, OSError) else found
        reason = getattr(item, "reason", None)
        todo += [item.__cause__, item.__context__,
                 reason if isinstance(reason, BaseException) else None,
                 *(a for a in item.args if isinstance(a, BaseException))]
    if found is None:
        return None
    if isinstance(found, ConnectionRefusedError):
        return "connection refused"
    if isinstance(found, (socket.gaierror, urllib3.exceptions.NameResolutionError)):
        return "the host name could not be resolved"
    if not isinstance(found, urllib3.exceptions.NewConnectionError) or isinstance(
            found, requests.ConnectTimeout):
        return "no connection within the connect timeout"
    return "the connection could not be made"


def close_session(session: requests.Session) -> None:
    """Close our own session and every connection it pooled, now.

    Why not just ``Session.close()``: it only makes urllib3 forget its pools, and urllib3 2
    does not close a pool it forgets, so the idle sockets stay open until the pool is
    garbage-collected; a response still referenced (the last GET stream's, say) keeps its pool,
    and every socket in it, alive. A closed client kept in a variable then held its sockets.
    A connection still checked out is closed when its response is, since its pool is closed.
    """
    for adapter in session.adapters.values():
        managers = [getattr(adapter, "poolmanager", None),
                    *getattr(adapter, "proxy_manager", {}).values()]
        for manager in managers:
            pools = getattr(manager, "pools", None)
            if pools is None:
                continue
            for key in list(pools.keys()):
                pool = pools.get(key)
                if pool is not None:
                    pool.close()
    session.close()


def media_type(response: requests.Response) -> str:
    """The ``Content-Type`` without parameters, lower-cased ("" when absent)."""
    value = response.headers.get("Content-Type") or ""
    return value.split(";", 1)[0].strip().lower()


def iter_chunks(response: requests.Response) -> Iterator[bytes]:
    """Bytes as they arrive: one HTTP chunk at a time (chunked encoding), else ``read1``.

    ``iter_content(chunk_size=None)`` waits for EOF on a stream without chunked encoding
    (a plain HTTP/1.0-style stream), so the raw response is read directly.
    """
    raw = response.raw
    if getattr(raw, "chunked", False) and raw.supports_chunked_reads():
        for chunk in raw.read_chunked(None, decode_content=True):
            if chunk:
                yield chunk
        return
    while True:
        chunk = raw.read1(READ1_SIZE, decode_content=True)
        if not chunk:
            return
        yield chunk


def read_body(response: requests.Response, limit: int, what: str) -> bytes:
    """The whole body, refusing (and closing the connection) past ``limit`` bytes."""
    length = response.headers.get("Content-Length")
    if length is not None and length.isdigit() and int(length) > limit:
        response.close()
        raise TransportError(f"{what}: the reply body is {length} bytes, over the "
                             f"{limit}-byte limit (max_frame_bytes)")
    raw = response.raw
    if length is not None and length.isdigit() and not getattr(raw, "chunked", False):
        data: bytes = raw.read(decode_content=True)
    else:
        parts: list[bytes] = []
        size = 0
        for chunk in iter_chunks(response):
            size += len(chunk)
            if size > limit:
                response.close()
                raise TransportError(f"{what}: the reply body is over the {limit}-byte "
                                     "limit (max_frame_bytes)")
            parts.append(chunk)
        data = b"".join(parts)
    if len(data) > limit:
        response.close()
        raise TransportError(f"{what}: the reply body is {len(data)} bytes, over the "
                             f"{limit}-byte limit (max_frame_bytes)")
    return data


class Described(Protocol):
    """What :func:`map_network_errors` needs to say which call failed, and where."""

    @property
    def method(self) -> str | None: ...
    @property
    def server(self) -> str: ...
    @property
    def url(self) -> str: ...
    def describe(self) -> str: ...


@contextlib.contextmanager
def map_network_errors(call: Described) -> Iterator[None]:
    """The one place a raw network failure becomes an mcpsync error.

    ``ConnectFailed`` when no connection was made (nothing was sent, so the chain, which
    speaks of our private pool and connection classes, is dropped); otherwise
    ``ConnectionLost`` with ``maybe_executed`` (the server may have acted), chained ``from``
    the network error. mcpsync errors pass through untouched. The URL shown has no credentials.
    """
    try:
        yield
    except MCPError:
        raise   # ours already (ConnectionLost is an OSError too)
    except NETWORK_ERRORS as exc:
        reason = connect_failure(exc)
        if reason is not None:
            url = redact_url(call.url)
            raise ConnectFailed(f"{call.describe()}: could not connect to {url} ({reason}); "
                                "is the server running there?", url=url, server=call.server,
                                method=call.method) from None
        raise ConnectionLost(f"{call.describe()}: the HTTP request failed: {exc}",
                             maybe_executed=True, server=call.server,
                             method=call.method) from exc


def from_network(exc: BaseException) -> bool:
    """Whether ``exc`` is what :func:`map_network_errors` made of a network failure (as
    opposed to an mcpsync error that passed through it): a retry is for those only."""
    cause = exc.__context__
    return isinstance(exc, ConnectionLost) and isinstance(cause, NETWORK_ERRORS) \
        and not isinstance(cause, MCPError)
