"""The live NVIDIA documentation: fetch (httpx), split into sections (beautifulsoup4), cache.

NVIDIA's guides are Sphinx pages: each section is a ``<section id="...">`` (older builds:
``<div class="section" id="...">``) whose first heading is its title, with nested sections
inside. :func:`parse_sections` turns a page into one passage per section (its own text,
without its subsections), long ones cut into parts. Fetched HTML is data: scripts, styles and
navigation are dropped, only text is kept, and nothing in it is ever acted upon.

Each page is cached as parsed sections (JSON) under the cache directory with its ETag and
Last-Modified. Within the TTL the cache answers without a request; after it the page is
revalidated with a conditional GET (304 keeps the cache). Without network the cache answers,
however old, and the page's status says so.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from ..files import write_atomic

CACHE_FORMAT = 1
MAX_PAGE_BYTES = 40 * 2**20
MAX_PART_CHARS = 2400
USER_AGENT = "kernelopt-docs/0.1 (CUDA optimization guidance search)"


@dataclass(frozen=True)
class LivePage:
    path: str  # relative to the docs base URL
    guide: str
    archs: tuple[str, ...] = ()


LIVE_PAGES = (
    LivePage("cuda-c-programming-guide/index.html", "CUDA C++ Programming Guide"),
    LivePage("cuda-c-best-practices-guide/index.html", "CUDA C++ Best Practices Guide"),
    LivePage("hopper-tuning-guide/index.html", "Hopper Tuning Guide", ("sm_90",)),
    LivePage("parallel-thread-execution/index.html", "PTX ISA"),
)


@dataclass
class Section:
    url: str
    title: str
    text: str
    guide: str
    archs: list[str] = field(default_factory=list)


@dataclass
class CachedPage:
    url: str
    sections: list[Section]
    fetched_at: float
    etag: str | None = None
    last_modified: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"format": CACHE_FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CachedPage:
        return cls(
            url=data["url"], sections=[Section(**s) for s in data["sections"]], fetched_at=float(data["fetched_at"]),
            etag=data.get("etag"), last_modified=data.get("last_modified"),
        )


@dataclass
class PageStatus:
    url: str
    guide: str
    status: str  # fresh (cache within TTL), revalidated (304), fetched (200), stale, missing, offline
    sections: int = 0
    error: str | None = None


# --- parsing ---------------------------------------------------------------------------------

_SPACE = re.compile(r"\s+")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")
_DROP = ["script", "style", "noscript", "nav", "header", "footer", "form", "button", "svg", "template",
         "iframe", "object"]


def _clean(text: str) -> str:
    return _SPACE.sub(" ", _CONTROL.sub(" ", text)).strip()


def _is_section(tag: Any) -> bool:
    if not getattr(tag, "name", None) or not tag.get("id"):
        return False
    return tag.name == "section" or (tag.name == "div" and "section" in (tag.get("class") or []))


def parse_sections(html: str | bytes, page_url: str, guide: str, archs: tuple[str, ...] = ()) -> list[Section]:
    """One passage per Sphinx section: title, ``page_url#id``, and the section's own text."""
    from bs4 import BeautifulSoup  # imported here: only live docs need it

    try:
        import lxml  # noqa: F401  (several times faster on the large guides)
        parser = "lxml"
    except ImportError:
        parser = "html.parser"
    soup = BeautifulSoup(html, parser)
    for tag in soup(_DROP):
        tag.decompose()
    for tag in soup.select("a.headerlink"):
        tag.decompose()
    root = soup.find("article") or soup.find(None, {"role": "main"}) or soup.find("main") or soup.body or soup
    out: list[Section] = []
    for sec in root.find_all(_is_section):
        heading = None
        parts: list[str] = []
        for child in sec.children:
            if _is_section(child):
                continue
            name = getattr(child, "name", None)
            if heading is None and name and re.fullmatch(r"h[1-6]", name):
                heading = child
                continue
            text = child.get_text(" ") if name else str(child)
            if text.strip():
                parts.append(text)
        title = _clean(heading.get_text(" ")) if heading is not None else str(sec["id"]).replace("-", " ")
        title = title.rstrip("#¶ ").strip()
        body = _clean(" ".join(parts))
        if len(body) < 40:
            continue
        url = f"{page_url.split('#')[0]}#{sec['id']}"
        chunks = _split(body)
        for i, chunk in enumerate(chunks):
            label = title if len(chunks) == 1 else f"{title} (part {i + 1} of {len(chunks)})"
            out.append(Section(url=url, title=label, text=chunk, guide=guide, archs=list(archs)))
    return out


def _split(text: str) -> list[str]:
    """Cut long sections at sentence ends into parts of at most MAX_PART_CHARS."""
    if len(text) <= MAX_PART_CHARS:
        return [text]
    sentences = re.split(r"(?<=[.!?])\s+", text)
    parts, current = [], ""
    for s in sentences:
        while len(s) > MAX_PART_CHARS:  # a huge table or code block without sentence ends
            if current:
                parts.append(current)
                current = ""
            parts.append(s[:MAX_PART_CHARS])
            s = s[MAX_PART_CHARS:]
        if len(current) + len(s) + 1 > MAX_PART_CHARS and current:
            parts.append(current)
            current = s
        else:
            current = f"{current} {s}".strip()
    if current:
        parts.append(current)
    return parts


# --- cache and fetch -------------------------------------------------------------------------


def _cache_file(cache_dir: Path, url: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9]+", "-", url.split("://", 1)[-1])[:80].strip("-")
    return cache_dir / f"{slug}-{hashlib.sha256(url.encode()).hexdigest()[:12]}.json"


def load_cached(cache_dir: Path, url: str) -> CachedPage | None:
    try:
        data = json.loads(_cache_file(cache_dir, url).read_text())
        if data.get("format") != CACHE_FORMAT or data.get("url") != url:
            return None
        return CachedPage.from_json(data)
    except (OSError, ValueError, KeyError, TypeError):
        return None


def save_cached(cache_dir: Path, page: CachedPage) -> None:
    cache_dir.mkdir(parents=True, exist_ok=True)
    target = _cache_file(cache_dir, page.url)
    write_atomic(target, json.dumps(page.to_json()).encode(), durable=False)  # regenerable cache


def load_pages(
    base_url: str,
    cache_dir: Path,
    *,
    ttl_s: float,
    offline: bool = False,
    pages: tuple[LivePage, ...] = LIVE_PAGES,
    timeout_s: float = 30.0,
    progress: Callable[[str], None] | None = None,
) -> tuple[list[CachedPage], list[PageStatus]]:
    """Every page's sections, from the cache or the network, and how each was obtained."""
    say = progress or (lambda message: None)
    base = base_url if base_url.endswith("/") else base_url + "/"
    now = time.time()
    loaded: list[CachedPage] = []
    statuses: list[PageStatus] = []
    unreachable: str | None = None  # after one connection failure, don't try the same host again
    client = None
    try:
        for page in pages:
            url = urljoin(base, page.path)
            cached = load_cached(cache_dir, url)
            if offline or unreachable is not None:
                status = "offline" if offline else ("stale" if cached else "missing")
                statuses.append(PageStatus(url, page.guide, status, len(cached.sections) if cached else 0, unreachable))
                if cached:
                    loaded.append(cached)
                continue
            if cached and now - cached.fetched_at < ttl_s:
                statuses.append(PageStatus(url, page.guide, "fresh", len(cached.sections)))
                loaded.append(cached)
                continue
            if client is None:
                import httpx  # imported here: offline searches never need it

                client = httpx.Client(
                    timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)), follow_redirects=True,
                    headers={"User-Agent": USER_AGENT},
                )
            say(f"fetching {page.guide} ({url})")
            try:
                result, status = _fetch(client, url, page, cached)
                save_cached(cache_dir, result)
                statuses.append(PageStatus(url, page.guide, status, len(result.sections)))
                loaded.append(result)
            except Exception as exc:  # network, HTTP status, oversize, unparsable: all fall back to the cache
                reason = f"{type(exc).__name__}: {exc}"[:300]
                if _is_connection_error(exc):
                    unreachable = reason
                statuses.append(PageStatus(url, page.guide, "stale" if cached else "missing",
                                           len(cached.sections) if cached else 0, reason))
                if cached:
                    loaded.append(cached)
    finally:
        if client is not None:
            client.close()
    return loaded, statuses


def _is_connection_error(exc: Exception) -> bool:
    try:
        import httpx
    except ImportError:
        return False
    return isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout, httpx.ProxyError, httpx.UnsupportedProtocol))


def _fetch(client: Any, url: str, page: LivePage, cached: CachedPage | None) -> tuple[CachedPage, str]:
    headers = {}
    if cached and cached.etag:
        headers["If-None-Match"] = cached.etag
    if cached and cached.last_modified:
        headers["If-Modified-Since"] = cached.last_modified
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code == 304 and cached is not None:
            cached.fetched_at = time.time()
            return cached, "revalidated"
        response.raise_for_status()
        body = bytearray()
        for chunk in response.iter_bytes():
            body += chunk
            if len(body) > MAX_PAGE_BYTES:
                raise ValueError(f"{url} is larger than {MAX_PAGE_BYTES} bytes")
        etag, modified = response.headers.get("ETag"), response.headers.get("Last-Modified")
    sections = parse_sections(bytes(body), url, page.guide, page.archs)
    if not sections:
        raise ValueError(f"{url}: no documentation sections found in the page")
    return CachedPage(url, sections, time.time(), etag, modified), "fetched"
