"""Resource URIs and URI templates of several upstreams, made distinct and mapped back.

Two upstreams may both serve ``file:///README.md``; the host must see two resources and a
read must reach the right one. Every URI an upstream shows is rewritten as

    mcpgw://<upstream id, percent-encoded>/<the original URI, unchanged>

The original is appended verbatim, so any string round-trips (queries, fragments, unicode,
``file:///``, even text that is not a valid URI), and mapping back is "strip the prefix":
no table is needed, which matters because a template stands for infinitely many URIs. A
URI template (RFC 6570) gets the same literal prefix; the prefix holds no ``{``, so the
expansion of the rewritten template is the prefix followed by the expansion of the
original, and maps back by the same rule. The upstream id is percent-encoded (nothing but
unreserved characters left), so it never holds the ``/`` that ends it.

The payload helpers take and return parsed JSON (dicts and lists), copy only what they
change and keep every other member, in order, as it was.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any, Final
from urllib.parse import quote, unquote

__all__ = ["SCHEME", "split_listen_filter", "unwrap_uri", "unwrap_uri_params",
           "wrap_content_blocks", "wrap_contents", "wrap_listen_filter", "wrap_prompt_result",
           "wrap_resources", "wrap_templates", "wrap_tool_result", "wrap_updated", "wrap_uri"]

#: The scheme of every URI the gateway shows for an upstream's resource.
SCHEME: Final = "mcpgw"
_PREFIX: Final = SCHEME + "://"


def wrap_uri(upstream: str, uri: str) -> str:
    """``uri`` of ``upstream`` as the host sees it; also right for a URI template."""
    return f"{_PREFIX}{quote(upstream, safe='')}/{uri}"


def unwrap_uri(uri: str, upstreams: Collection[str] | None = None) -> tuple[str, str] | None:
    """``(upstream, original URI)`` for a URI made by :func:`wrap_uri`; ``None`` if it is not one.

    With ``upstreams``, the id must be one of them; a host that lower-cased the authority
    (hosts are case-insensitive in URIs) still matches when exactly one id fits.
    """
    if not uri.startswith(_PREFIX):
        return None
    encoded, slash, original = uri[len(_PREFIX):].partition("/")
    if not slash:
        return None
    try:
        upstream = unquote(encoded, errors="strict")
    except UnicodeDecodeError:
        return None
    if upstreams is None or upstream in upstreams:
        return upstream, original
    folded = [u for u in upstreams if u.casefold() == upstream.casefold()]
    return (folded[0], original) if len(folded) == 1 else None


def _wrap_member(upstream: str, item: Any, key: str) -> Any:
    if isinstance(item, dict) and isinstance(item.get(key), str):
        return {**item, key: wrap_uri(upstream, item[key])}
    return item


def _wrap_list(upstream: str, result: Any, list_key: str, key: str) -> Any:
    if not isinstance(result, dict) or not isinstance(result.get(list_key), list):
        return result
    return {**result, list_key: [_wrap_member(upstream, item, key)
                                 for item in result[list_key]]}


def wrap_resources(upstream: str, result: Any) -> Any:
    """A ``resources/list`` result with every ``uri`` rewritten."""
    return _wrap_list(upstream, result, "resources", "uri")


def wrap_templates(upstream: str, result: Any) -> Any:
    """A ``resources/templates/list`` result with every ``uriTemplate`` rewritten."""
    return _wrap_list(upstream, result, "resourceTemplates", "uriTemplate")


def wrap_contents(upstream: str, result: Any) -> Any:
    """A ``resources/read`` result with the ``uri`` of every entry of ``contents`` rewritten."""
    return _wrap_list(upstream, result, "contents", "uri")


def _wrap_block(upstream: str, block: Any) -> Any:
    if not isinstance(block, dict):
        return block
    if block.get("type") == "resource_link":
        return _wrap_member(upstream, block, "uri")
    if block.get("type") == "resource" and isinstance(block.get("resource"), dict):
        return {**block, "resource": _wrap_member(upstream, block["resource"], "uri")}
    return block


def wrap_content_blocks(upstream: str, blocks: Any) -> Any:
    """Content blocks with the URIs of ``resource_link`` and embedded ``resource`` blocks
    rewritten, so a host can read what a tool or prompt pointed at through the gateway."""
    if not isinstance(blocks, list):
        return blocks
    return [_wrap_block(upstream, block) for block in blocks]


def wrap_tool_result(upstream: str, result: Any) -> Any:
    """A ``tools/call`` result with the resource URIs in its ``content`` rewritten."""
    if not isinstance(result, dict) or "content" not in result:
        return result
    return {**result, "content": wrap_content_blocks(upstream, result["content"])}


def wrap_prompt_result(upstream: str, result: Any) -> Any:
    """A ``prompts/get`` result with the resource URIs in its messages' content rewritten."""
    if not isinstance(result, dict) or not isinstance(result.get("messages"), list):
        return result
    messages = [{**m, "content": _wrap_block(upstream, m["content"])}
                if isinstance(m, dict) and "content" in m else m
                for m in result["messages"]]
    return {**result, "messages": messages}


def unwrap_uri_params(params: Any, upstreams: Collection[str]) -> tuple[str, Any] | None:
    """``(upstream, params for it)`` for ``resources/read``, ``resources/subscribe`` and
    ``resources/unsubscribe`` params (and a ``ref/resource`` completion ref): ``uri`` mapped
    back; ``None`` when ``uri`` is missing or not one of the gateway's."""
    if not isinstance(params, dict) or not isinstance(params.get("uri"), str):
        return None
    found = unwrap_uri(params["uri"], upstreams)
    if found is None:
        return None
    upstream, original = found
    return upstream, {**params, "uri": original}


def wrap_updated(upstream: str, params: Any) -> Any:
    """``notifications/resources/updated`` params with ``uri`` rewritten."""
    return _wrap_member(upstream, params, "uri")


def split_listen_filter(notifications: Any,
                        upstreams: Sequence[str]) -> dict[str, dict[str, Any]]:
    """A host's ``subscriptions/listen`` filter, split into one filter per upstream.

    The ``...ListChanged`` flags (and any member the gateway does not know) go to every
    upstream in ``upstreams``; ``resourceSubscriptions`` are mapped back and each goes only
    to its own upstream (an upstream without any keeps the member out). A URI that is not
    one of the gateway's is dropped: no upstream could honour it, and the acknowledgement
    the host gets (see :func:`wrap_listen_filter`) shows it was not taken.
    """
    if not isinstance(notifications, dict):
        return {u: {} for u in upstreams}
    common = {k: v for k, v in notifications.items() if k != "resourceSubscriptions"}
    per: dict[str, list[str]] = {}
    wanted = notifications.get("resourceSubscriptions")
    if isinstance(wanted, list):
        for uri in wanted:
            found = unwrap_uri(uri, upstreams) if isinstance(uri, str) else None
            if found is not None:
                per.setdefault(found[0], []).append(found[1])
    out: dict[str, dict[str, Any]] = {}
    for upstream in upstreams:
        one = dict(common)
        if upstream in per:
            one["resourceSubscriptions"] = per[upstream]
        out[upstream] = one
    return out


def wrap_listen_filter(upstream: str, notifications: Any) -> Any:
    """An upstream's filter (from ``notifications/subscriptions/acknowledged``) with its
    ``resourceSubscriptions`` rewritten for the host."""
    if not isinstance(notifications, Mapping) or not isinstance(
            notifications.get("resourceSubscriptions"), list):
        return notifications
    return {**notifications, "resourceSubscriptions": [
        wrap_uri(upstream, u) if isinstance(u, str) else u
        for u in notifications["resourceSubscriptions"]]}
