"""Rich HTML from operators is sanitised (nh3) before it is stored or shown."""

import html
import re

import nh3

_TAGS = {
    "a", "abbr", "b", "blockquote", "br", "code", "em", "h1", "h2", "h3", "h4", "hr", "i", "img",
    "li", "ol", "p", "pre", "s", "small", "span", "strong", "sub", "sup", "table", "tbody", "td",
    "th", "thead", "tr", "u", "ul",
}  # fmt: skip
_ATTRIBUTES = {
    "a": {"href", "title"},
    "img": {"src", "alt", "title", "width", "height"},
    "td": {"colspan", "rowspan"},
    "th": {"colspan", "rowspan"},
    "abbr": {"title"},
}
_URL_SCHEMES = {"https", "http", "mailto"}
_WS = re.compile(r"\s+")
_TAG = re.compile(r"<[^>]*>")
# Block boundaries become spaces in plain text ("<p>a</p><p>b</p>" -> "a b").
_BLOCK_EDGE = re.compile(r"<(/?(?:p|div|br|li|ul|ol|h[1-6]|tr|td|th|blockquote|pre|hr|table)\b[^>]*)>", re.IGNORECASE)


def sanitize_html(value: str) -> str:
    """Keep formatting, drop scripts, event handlers, styles and unsafe URLs."""
    return nh3.clean(
        value or "",
        tags=_TAGS,
        attributes=_ATTRIBUTES,
        url_schemes=_URL_SCHEMES,
        link_rel="noopener noreferrer nofollow",
        strip_comments=True,
    )


def html_to_text(value: str) -> str:
    """Plain text of sanitised HTML, whitespace folded."""
    cleaned = nh3.clean(_BLOCK_EDGE.sub(r" <\1>", value or ""), tags=set())
    return _WS.sub(" ", html.unescape(_TAG.sub(" ", cleaned))).strip()


def summarize(value: str, *, length: int = 160) -> str:
    """A one-line summary of rich HTML, cut on a word boundary."""
    text = html_to_text(value)
    if len(text) <= length:
        return text
    cut = text[: length - 1].rsplit(" ", 1)[0]
    return cut + "…"
