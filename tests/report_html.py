"""Read the report's tables back cell by cell, so tests check a row's cells, not the whole page."""

from __future__ import annotations

import re
from html.parser import HTMLParser


class _Tables(HTMLParser):
    """Collects, per section id, the rows of its tables: each row a list of (tag, text, class)."""

    def __init__(self):
        super().__init__()
        self.sections: dict[str, list[list[tuple[str, str, str]]]] = {}
        self._section: str | None = None
        self._row: list | None = None
        self._cell: list | None = None

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self._section = attrs.get("id")
            self.sections.setdefault(self._section, [])
        elif tag == "tr" and self._section is not None:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = [tag, "", attrs.get("class") or ""]

    def handle_endtag(self, tag):
        if tag in ("td", "th") and self._cell is not None:
            self._row.append((self._cell[0], re.sub(r"\s+", " ", self._cell[1]).strip(), self._cell[2]))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            self.sections[self._section].append(self._row)
            self._row = None
        elif tag == "section":
            self._section = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell[1] += data


def table_rows(html: str, section_id: str, which: int = -1) -> list[dict[str, str]]:
    """The rows of a table in <section id=section_id> (by default its last: a figure's checks come
    before its cells), each as {column header: cell text}. A row of header cells starts a table."""
    parser = _Tables()
    parser.feed(html)
    tables: list[list] = []
    for row in parser.sections[section_id]:
        if all(tag == "th" for tag, _, _ in row):
            tables.append([[text for _, text, _ in row]])
        else:
            tables[-1].append(row)
    header, *rows = tables[which]
    return [dict(zip(header, (text for _, text, _ in row))) for row in rows]


def row_by_label(html: str, section_id: str, label: str) -> dict[str, str]:
    matches = [r for r in table_rows(html, section_id) if r["row"] == label]
    assert len(matches) == 1, f"{section_id}: {len(matches)} rows labelled {label!r}"
    return matches[0]
