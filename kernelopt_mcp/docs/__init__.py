"""CUDA optimization guidance search: an offline knowledge base written for kernelopt, plus
the live NVIDIA guides (CUDA C++ Programming Guide, Best Practices Guide, Hopper Tuning Guide,
PTX ISA) fetched, split into sections, cached, and ranked together with BM25."""

from __future__ import annotations

from .live import LIVE_PAGES, LivePage, Section, parse_sections
from .search import DocPassage, DocsSearchResult, KnowledgeEntry, arch_factor, load_knowledge_base, search_docs

__all__ = [
    "LIVE_PAGES", "DocPassage", "DocsSearchResult", "KnowledgeEntry", "LivePage", "Section", "arch_factor",
    "load_knowledge_base", "parse_sections", "search_docs",
]
