"""Readable text from HTML, for a model: headings, paragraphs, lists, links and tables.

Parsing is selectolax's Lexbor engine (a WHATWG HTML5 parser in C: one small wheel with
no further dependencies, imported in milliseconds). This module only lays the parsed tree
out as text; it is imported on the first `web_fetch`, never on a worker's start path.
"""

from __future__ import annotations

import re
from typing import Any

SKIPPED = {"script", "style", "noscript", "template", "svg", "canvas", "iframe", "head",
           "nav", "footer", "form", "button", "select", "option", "-comment"}
BLOCKS = {"p", "div", "section", "article", "main", "header", "aside", "blockquote",
          "figure", "figcaption", "address", "details", "summary", "dl", "dt", "dd", "table",
          "ul", "ol", "hr", "br", "h1", "h2", "h3", "h4", "h5", "h6", "li", "tr", "pre"}
_SPACES = re.compile(r"[ \t\r\f\v]+")
_BLANKS = re.compile(r"\n{3,}")
_KEPT_SPACE = "\ue000"  # preformatted spaces, shielded from the whitespace clean-up


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """(title, text) of a page."""
    from selectolax.lexbor import LexborHTMLParser

    tree = LexborHTMLParser(html)
    title_node = tree.css_first("title")
    title = " ".join(title_node.text().split()) if title_node is not None else ""
    root = tree.body or tree.root
    out: list[str] = []
    if root is not None:
        _walk(root, out, base_url)
    text = _SPACES.sub(" ", "".join(out))
    text = "\n".join(line.strip() for line in text.split("\n"))
    return title, _BLANKS.sub("\n\n", text).strip().replace(_KEPT_SPACE, " ")


def _walk(node: Any, out: list[str], base_url: str) -> None:
    for child in node.iter(include_text=True):
        tag = child.tag
        if tag == "-text":
            out.append(child.text_content or "")
        elif tag in SKIPPED or _hidden(child):
            continue
        elif tag == "pre":
            kept = (child.text(deep=True) or "").replace("\t", "    ").replace(" ", _KEPT_SPACE)
            out.append("\n\n" + kept + "\n\n")
        elif tag in ("h1", "h2", "h3", "h4", "h5", "h6"):
            out.append("\n\n" + "#" * int(tag[1]) + " ")
            _walk(child, out, base_url)
            out.append("\n\n")
        elif tag == "li":
            out.append("\n- ")
            _walk(child, out, base_url)
        elif tag in ("td", "th"):
            _walk(child, out, base_url)
            out.append(" | ")
        elif tag == "a":
            _link(child, out, base_url)
        elif tag == "img":
            alt = (child.attributes.get("alt") or "").strip()
            if alt:
                out.append(f"[image: {alt}]")
        elif tag in BLOCKS:
            out.append("\n" if tag in ("br", "tr", "dt", "dd") else "\n\n")
            _walk(child, out, base_url)
            out.append("\n" if tag in ("tr", "dt", "dd") else "\n\n")
        else:
            _walk(child, out, base_url)


def _link(node: Any, out: list[str], base_url: str) -> None:
    start = len(out)
    _walk(node, out, base_url)
    label = " ".join("".join(out[start:]).split())
    href = (node.attributes.get("href") or "").strip()
    if href and not href.startswith(("#", "javascript:", "mailto:")) and label:
        from urllib.parse import urljoin

        out.append(f" ({urljoin(base_url, href)})")


def _hidden(node: Any) -> bool:
    attrs = node.attributes
    style = (attrs.get("style") or "").replace(" ", "").lower()
    return "hidden" in attrs or attrs.get("aria-hidden") == "true" or "display:none" in style
