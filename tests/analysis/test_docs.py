"""Docs search: the shipped knowledge base, Sphinx page parsing, BM25 ranking with the live
pages, the on-disk cache (TTL, ETag revalidation), and the fallback without network.

The live docs are the fixture pages in tests/fixtures/docs/ (in the structure of NVIDIA's
Sphinx guides), served by a small HTTP server on 127.0.0.1 that counts requests. No test
touches any other network.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kernelopt_mcp.cli import main
from kernelopt_mcp.config import Settings
from kernelopt_mcp.docs import (
    arch_factor,
    load_knowledge_base,
    parse_sections,
    search_docs,
)
from kernelopt_mcp.docs.bm25 import BM25, tokenize

PAGES = Path(__file__).parents[1] / "fixtures" / "docs"


@dataclass
class DocsServer:
    url: str
    gets: list[str] = field(default_factory=list)
    not_modified: list[str] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


@pytest.fixture
def docs_server() -> Iterator[DocsServer]:
    state = DocsServer(url="")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            path = (PAGES / self.path.lstrip("/").split("?")[0]).resolve()
            if not path.is_relative_to(PAGES.resolve()) or not path.is_file():
                self.send_error(404)
                return
            body = path.read_bytes()
            etag = '"' + hashlib.sha256(body).hexdigest()[:16] + '"'
            if self.headers.get("If-None-Match") == etag:
                state.not_modified.append(self.path)
                self.send_response(304)
                self.send_header("ETag", etag)
                self.end_headers()
                return
            state.gets.append(self.path)
            self.send_response(200)
            self.send_header("Content-Type", "text/html; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("ETag", etag)
            self.send_header("Last-Modified", "Mon, 02 Nov 2026 10:00:00 GMT")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    state.server = server
    state.url = f"http://127.0.0.1:{server.server_address[1]}/docs/"
    Handler.path_prefix = "/docs/"  # type: ignore[attr-defined]
    # serve PAGES under /docs/ as the live site serves the guides under /cuda/
    original = Handler.do_GET

    def do_get(self: BaseHTTPRequestHandler) -> None:
        if not self.path.startswith("/docs/"):
            self.send_error(404)
            return
        self.path = self.path[len("/docs"):]
        original(self)  # type: ignore[arg-type]

    Handler.do_GET = do_get  # type: ignore[method-assign]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.stop()


def settings_for(url: str, tmp_path: Path, **kw: object) -> Settings:
    return Settings(docs_url=url, cache_dir=tmp_path / "cache", **kw)  # type: ignore[arg-type]


# --- the knowledge base ------------------------------------------------------------------------


def test_knowledge_base_covers_the_core_techniques() -> None:
    kb = load_knowledge_base()
    assert len(kb) >= 40 and len({e.id for e in kb}) == len(kb)
    text = {e.id: f"{e.title} {' '.join(e.topics)} {e.text}".lower() for e in kb}
    for subject in [
        "coalescing", "tiling", "bank conflicts", "padding", "register blocking", "float4", "launch bounds",
        "occupancy", "ilp", "shuffle", "reduction", "atomic", "wmma", "mma", "cp.async", "tma", "wgmma",
        "cluster", "distributed shared memory", "l2", "fast math", "divergence", "grid-stride", "persistent",
        "__ldg", "constant memory", "unroll", "split-k", "double buffering", "roofline", "online softmax",
        "welford", "transpose", "contention", "cooperative groups", "cuda graphs",
    ]:
        assert any(subject in t for t in text.values()), subject
    for e in kb:
        assert e.source.startswith("https://docs.nvidia.com/"), e.id
        assert all(a.startswith("sm_") for a in e.archs), e.id
        assert 250 <= len(e.text) <= 900 and e.text.count(". ") >= 2, e.id


def test_arch_factor() -> None:
    assert arch_factor(["sm_90"], "sm_90") > arch_factor(["sm_70+"], "sm_90") > arch_factor([], "sm_90")
    assert arch_factor(["sm_90"], "sm_90a") == arch_factor(["sm_90"], "sm_90")
    assert arch_factor(["sm_90"], "sm_80") < arch_factor([], "sm_80")
    assert arch_factor(["sm_80+"], "sm_75") < 1 and arch_factor(["sm_80+"], None) == 1


def test_bm25_prefers_the_focused_document() -> None:
    docs = [tokenize(t) for t in ["bank conflicts in shared memory banks", "global memory coalescing of loads",
                                  "shared memory is fast " * 10]]
    scores = BM25(docs).scores(tokenize("shared memory bank conflicts"))
    assert scores[0] > scores[2] > scores[1] > 0  # doc 1 shares only 'memory'
    assert tokenize("Coalesced coalescing coalesce") == ["coalesc"] * 3


def test_offline_search_answers_bank_conflicts_first(tmp_path: Path) -> None:
    r = search_docs("shared memory bank conflicts",
                    settings=settings_for("http://127.0.0.1:9/", tmp_path), offline=True)
    assert [p.id for p in r.passages[:2]] == ["bank-conflicts", "bank-conflict-padding"]
    assert r.live_status == "offline" and "not contacted" in r.message
    assert all(p.source == "offline" and len(p.snippet) <= 400 for p in r.passages)


def test_arch_orders_equals(tmp_path: Path) -> None:
    s = settings_for("http://127.0.0.1:9/", tmp_path)
    hopper = search_docs("tensor cores matrix multiply", arch="sm_90", settings=s, offline=True)
    ampere = search_docs("tensor cores matrix multiply", arch="sm_80", settings=s, offline=True)
    rank = lambda r, i: [p.id for p in r.passages].index(i) if i in [p.id for p in r.passages] else 99  # noqa: E731
    assert rank(hopper, "wgmma") < rank(ampere, "wgmma")
    assert rank(ampere, "mma-sync-ldmatrix") < rank(ampere, "wgmma")


# --- parsing the Sphinx pages ------------------------------------------------------------------


def test_sections_are_split_with_titles_anchors_and_own_text() -> None:
    url = "https://docs.example/cuda-c-best-practices-guide/index.html"
    sections = parse_sections((PAGES / "cuda-c-best-practices-guide" / "index.html").read_bytes(), url,
                              "Best Practices")
    by_id = {s.url.split("#")[1]: s for s in sections}
    assert list(by_id) == [
        "cuda-c-best-practices-guide", "memory-optimizations", "device-memory-spaces",
        "coalesced-access-to-global-memory",
        "strided-accesses", "shared-memory", "shared-memory-and-memory-banks", "occupancy",
    ]
    coalesced = by_id["coalesced-access-to-global-memory"]
    assert (coalesced.title == "10.2.1. Coalesced Access to Global Memory"
            and coalesced.url == f"{url}#coalesced-access-to-global-memory")
    assert "__global__ void copy" in coalesced.text and "perfectly coalesced" in coalesced.text
    # a section's text is its own: not its subsections', not navigation, scripts, styles or footers
    assert "Strided" not in by_id["device-memory-spaces"].text and "bank conflict" not in by_id["shared-memory"].text
    everything = " ".join(s.title + " " + s.text for s in sections)
    for junk in ("SCRIPT TEXT", "ignore previous instructions", "font-family", "NVIDIA Docs Hub",
                 "footer text", "#", "¶"):
        assert junk not in everything, junk
    # the heading-only section (no text of its own) is skipped
    assert "execution-configuration-optimizations" not in by_id


def test_older_div_sections_and_long_sections() -> None:
    html = (PAGES / "cuda-c-programming-guide" / "index.html").read_text()
    sections = parse_sections(html, "https://x/pg/index.html", "Programming Guide")
    assert [s.title for s in sections][1:] == ["10.22. Warp Shuffle Functions", "2.2.1. Thread Block Clusters",
                                               "10.27. Asynchronous Data Copies"]
    long_html = ("<article><section id='big'><h2>Big</h2>" + "<p>" + "A sentence about memory. " * 400
                 + "</p></section></article>")
    parts = parse_sections(long_html, "https://x/p.html", "G")
    assert (len(parts) >= 4 and all(len(p.text) <= 2400 for p in parts)
            and parts[1].title == f"Big (part 2 of {len(parts)})")


# --- live pages, cache, fallback ----------------------------------------------------------------


def test_live_sections_rank_with_the_knowledge_base(docs_server: DocsServer, tmp_path: Path) -> None:
    s = settings_for(docs_server.url, tmp_path)
    r = search_docs("mbarrier expect_tx transaction bytes", arch="sm_90", settings=s)
    assert r.live_status == "ok" and r.message == ""
    assert (r.passages[0].url == f"{docs_server.url}"
            "parallel-thread-execution/index.html#parallel-synchronization-and-communication-instructions-mbarrier")
    assert r.passages[0].source == "live" and r.passages[0].guide == "PTX ISA"
    r = search_docs("coalesced access to global memory", settings=s)
    live = [p for p in r.passages if p.source == "live"]
    assert live[0].url.endswith("cuda-c-best-practices-guide/index.html#coalesced-access-to-global-memory")
    assert {p.source for p in r.passages[:3]} == {"offline", "live"} and r.passages[0].id == "coalescing"
    r = search_docs("tensor memory accelerator bulk copy", arch="sm_90", settings=s)
    hopper = next(p for p in r.passages if p.source == "live")
    assert hopper.url.endswith("hopper-tuning-guide/index.html#tensor-memory-accelerator") and hopper.archs == ["sm_90"]
    assert sorted(docs_server.gets) == sorted(f"/{p}" for p in [
        "cuda-c-programming-guide/index.html", "cuda-c-best-practices-guide/index.html",
        "hopper-tuning-guide/index.html", "parallel-thread-execution/index.html",
    ])


def test_cache_answers_within_the_ttl_and_revalidates_after(docs_server: DocsServer, tmp_path: Path) -> None:
    s = settings_for(docs_server.url, tmp_path)
    search_docs("warp shuffle", settings=s)
    assert len(docs_server.gets) == 4
    second = search_docs("warp shuffle reduction", settings=s)
    assert len(docs_server.gets) == 4 and not docs_server.not_modified, "the second query must not touch the network"
    assert {p["status"] for p in second.live_pages} == {"fresh"} and any(p.source == "live" for p in second.passages)
    expired = search_docs("warp shuffle", settings=settings_for(docs_server.url, tmp_path, docs_ttl_s=0.0))
    assert len(docs_server.gets) == 4 and len(docs_server.not_modified) == 4
    assert {p["status"] for p in expired.live_pages} == {"revalidated"} and expired.live_status == "ok"
    cached = list((tmp_path / "cache" / "docs").glob("*.json"))
    assert len(cached) == 4 and all(json.loads(c.read_text())["etag"] for c in cached)


def test_without_network_the_cache_and_the_knowledge_base_answer(docs_server: DocsServer, tmp_path: Path) -> None:
    url = docs_server.url
    search_docs("occupancy", settings=settings_for(url, tmp_path))  # fills the cache
    docs_server.stop()
    r = search_docs("thread block clusters distributed shared memory", arch="sm_90",
                    settings=settings_for(url, tmp_path, docs_ttl_s=0.0))
    assert r.live_status == "unreachable" and "unreachable" in r.message and "4 cached guide(s)" in r.message
    assert {p["status"] for p in r.live_pages} == {"stale"}
    top = r.passages[:3]
    assert {"thread-block-clusters", "distributed-shared-memory"} <= {p.id for p in r.passages[:4]}
    assert any(p.source == "live" and p.url.endswith("#thread-block-clusters") for p in top)
    cold = search_docs("shared memory bank conflicts", settings=settings_for(url, tmp_path / "cold"))
    assert cold.live_status == "unreachable" and "no cached guides" in cold.message
    assert cold.passages and all(p.source == "offline" for p in cold.passages)


def test_offline_mode_never_touches_the_network(docs_server: DocsServer, tmp_path: Path) -> None:
    r = search_docs("occupancy", settings=settings_for(docs_server.url, tmp_path, docs_offline=True))
    assert r.live_status == "offline" and not docs_server.gets and r.passages


def test_cli_docs(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_CACHE", str(tmp_path / "cache"))
    assert main(["docs", "shared", "memory", "bank", "conflicts", "--offline", "--arch", "sm_90", "-n", "3"]) == 0
    out = capsys.readouterr().out
    assert out.index("Shared-memory bank conflicts") < out.index("Padding and swizzling") and "offline:" in out
    assert main(["docs", "bank conflicts", "--offline", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["passages"][0]["id"] == "bank-conflicts" and payload["live_status"] == "offline"
