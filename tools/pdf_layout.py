"""Where the text of a printed PDF lies: the check that nothing runs off the page.

``text_runs(page)`` follows a page's content stream (pypdf parses it) through
the graphics state (``q``/``Q``/``cm``) and the text state (``BT``, ``Tm``,
``Td``, ``TD``, ``T*``, ``Tf``, ``Tc``, ``Tw``, ``Tz``, ``TL``) and returns, for
every text-showing operator (``Tj``, ``TJ``, ``'``, ``"``), the horizontal span
it paints, in points: its start, plus the advance of each glyph from the
font's widths (``/W`` of a Type0 font's descendant, ``/Widths`` of a simple or
Type3 font; PDF 1.7, sections 9.4.4 and 9.7.4). Chromium's PDF backend (Skia)
writes some of these operators.

What it can see: Chromium's PDF keeps a glyph that straddles the printable area's
edge and drops those wholly outside, so text running off the page leaves its
straddling glyph past the margin (unless the edge falls exactly between two
glyphs), and so does a space hanging at the end of a wrapped code line. Text cut
inside the page, by a box that scrolls on screen, is dropped where the box ends:
the text checks of tests/test_handouts.py (every code line of the page is in the
PDF) and the print layout's own report (tools/handouts.py) find that instead.
``size_shares`` finds a page that Chromium shrank to fit the paper.
"""

from __future__ import annotations

import io
from typing import NamedTuple

#: How far (points, 1/72 in) a glyph may reach past the margin and still count as
#: inside: MathJax's glyphs and equation tags overhang their boxes by up to ~1 pt.
TOLERANCE_PT = 2.0

IDENTITY = (1.0, 0.0, 0.0, 1.0, 0.0, 0.0)


class Run(NamedTuple):
    """One text-showing operation: the span it paints on the page, its baseline and its
    font's size as printed (points)."""

    x0: float
    x1: float
    y: float
    size: float


def _mul(a, b) -> tuple[float, ...]:
    """The PDF matrix product a x b of two [a b c d e f] affine matrices."""
    return (
        a[0] * b[0] + a[1] * b[2],
        a[0] * b[1] + a[1] * b[3],
        a[2] * b[0] + a[3] * b[2],
        a[2] * b[1] + a[3] * b[3],
        a[4] * b[0] + a[5] * b[2] + b[4],
        a[4] * b[1] + a[5] * b[3] + b[5],
    )


def _translate(tx: float, ty: float) -> tuple[float, ...]:
    return (1.0, 0.0, 0.0, 1.0, tx, ty)


class _Font:
    """The glyph advances of one font resource, in text space units per unit of size."""

    def __init__(self, font) -> None:
        font = font.get_object()
        self.two_bytes = font.get("/Subtype") == "/Type0"  # Identity-H: 2-byte glyph ids
        self.scale = 0.001
        self.widths: dict[int, float] = {}
        self.default = 0.0
        if self.two_bytes:
            cid = font["/DescendantFonts"][0].get_object()
            self.default = float(cid.get("/DW", 1000))
            self._read_w(list(cid.get("/W", [])))
        else:
            first = int(font.get("/FirstChar", 0))
            for k, width in enumerate(font.get("/Widths", [])):
                self.widths[first + k] = float(width)
            if font.get("/Subtype") == "/Type3":
                self.scale = float(font["/FontMatrix"][0])

    def _read_w(self, w: list) -> None:
        """/W: ``c [w1 w2 ...]`` or ``c_first c_last w`` entries (PDF 1.7, 9.7.4.3)."""
        i = 0
        while i + 1 < len(w):
            start, nxt = int(w[i]), w[i + 1].get_object()
            if isinstance(nxt, list):
                for k, width in enumerate(nxt):
                    self.widths[start + k] = float(width)
                i += 2
            else:
                for code in range(start, int(nxt) + 1):
                    self.widths[code] = float(w[i + 2])
                i += 3

    def codes(self, raw: bytes) -> list[int]:
        if self.two_bytes:
            return [raw[i] * 256 + raw[i + 1] for i in range(0, len(raw) - 1, 2)]
        return list(raw)

    def advance(self, code: int) -> float:
        return self.widths.get(code, self.default) * self.scale


def _raw(string) -> bytes:
    """The bytes of a string operand as written (pypdf may have decoded them as text)."""
    return bytes(getattr(string, "original_bytes", string))


class _TextState:
    def __init__(self, fonts: dict) -> None:
        self.fonts = fonts
        self.ctm, self.stack = IDENTITY, []
        self.tm = self.tlm = IDENTITY
        self.font, self.size = None, 1.0
        self.tc = self.tw = self.tl = 0.0
        self.th = 1.0
        self.runs: list[Run] = []

    def show(self, string) -> None:
        font = self.font
        advance = 0.0
        if font is not None:
            for code in font.codes(_raw(string)):
                space = self.tw if (code == 32 and not font.two_bytes) else 0.0
                advance += (font.advance(code) * self.size + self.tc + space) * self.th
        start = _mul(self.tm, self.ctm)
        end = _mul(_mul(_translate(advance, 0.0), self.tm), self.ctm)
        x0, x1 = sorted((start[4], end[4]))
        size = self.size * (start[2] ** 2 + start[3] ** 2) ** 0.5  # the vertical scale
        self.runs.append(Run(x0, x1, start[5], size))
        self.tm = _mul(_translate(advance, 0.0), self.tm)

    def next_line(self, tx: float, ty: float) -> None:
        self.tm = self.tlm = _mul(_translate(tx, ty), self.tlm)

    def apply(self, operands: list, op: bytes) -> None:
        if op == b"q":
            self.stack.append(self.ctm)
        elif op == b"Q":
            self.ctm = self.stack.pop() if self.stack else IDENTITY
        elif op == b"cm":
            self.ctm = _mul(tuple(float(v) for v in operands), self.ctm)
        elif op == b"BT":
            self.tm = self.tlm = IDENTITY
        elif op == b"Tm":
            self.tm = self.tlm = tuple(float(v) for v in operands)
        elif op in (b"Td", b"TD"):
            tx, ty = (float(v) for v in operands)
            if op == b"TD":
                self.tl = -ty
            self.next_line(tx, ty)
        elif op == b"T*":
            self.next_line(0.0, -self.tl)
        elif op == b"Tf":
            self.font, self.size = self.fonts.get(operands[0]), float(operands[1])
        elif op == b"Tc":
            self.tc = float(operands[0])
        elif op == b"Tw":
            self.tw = float(operands[0])
        elif op == b"Tz":
            self.th = float(operands[0]) / 100
        elif op == b"TL":
            self.tl = float(operands[0])
        elif op == b"Tj":
            self.show(operands[0])
        elif op == b"TJ":
            for item in operands[0]:
                if isinstance(item, (bytes, str)):
                    self.show(item)
                else:  # a kerning adjustment, thousandths of the size, leftwards
                    self.tm = _mul(
                        _translate(-float(item) / 1000 * self.size * self.th, 0.0), self.tm
                    )
        elif op in (b"'", b'"'):
            if op == b'"':
                self.tw, self.tc = float(operands[0]), float(operands[1])
            self.next_line(0.0, -self.tl)
            self.show(operands[-1])


def text_runs(page) -> list[Run]:
    """Every text-showing operation of a pypdf page, with the span it paints (points)."""
    from pypdf.generic import ContentStream

    resources = page.get("/Resources")
    resources = resources.get_object() if resources is not None else {}
    fonts = {name: _Font(font) for name, font in (resources.get("/Font") or {}).items()}
    state = _TextState(fonts)
    contents = page.get_contents()
    if contents is None:
        return []
    for operands, op in ContentStream(contents, page.pdf).operations:
        state.apply(operands, op)
    return state.runs


class Overflow(NamedTuple):
    """Text past a margin: its page (from 1), span and baseline (points), and its line."""

    page: int
    x0: float
    x1: float
    y: float
    line: str

    def __str__(self) -> str:
        return f"page {self.page}, x {self.x0:.0f} to {self.x1:.0f} pt: {self.line[:70]!r}"


def _lines(page) -> dict[float, str]:
    """The page's extracted text, by baseline (points, rounded)."""
    lines: dict[float, str] = {}

    def visit(text, cm, tm, font, size) -> None:
        y = round(_mul(tuple(tm), tuple(cm))[5])
        lines[y] = lines.get(y, "") + text

    page.extract_text(visitor_text=visit)
    return lines


def overflows(
    data: bytes, margin_left: float, margin_right: float, tolerance: float = TOLERANCE_PT
) -> list[Overflow]:
    """Text runs that reach past the left or right margin of their page (points)."""
    from pypdf import PdfReader

    found = []
    for number, page in enumerate(PdfReader(io.BytesIO(data)).pages, start=1):
        left = float(page.mediabox.left)
        right = left + float(page.mediabox.width) - margin_right + tolerance
        left += margin_left - tolerance
        outside = [r for r in text_runs(page) if r.x1 > r.x0 and (r.x0 < left or r.x1 > right)]
        if outside:
            lines = _lines(page)
            for run in outside:
                line = " ".join(t for y, t in lines.items() if abs(y - run.y) <= 1).strip()
                found.append(Overflow(number, run.x0, run.x1, run.y, line))
    return found


def size_shares(data: bytes) -> dict[float, float]:
    """Font size (points, to 0.1) -> the share of a PDF's text printed in it, by width.

    A page wider than the paper is shrunk to fit by Chromium, all of it: no text is
    then at the stylesheet's sizes (a paragraph of 16 CSS px prints at 12 pt)."""
    from collections import Counter

    from pypdf import PdfReader

    widths: Counter = Counter()
    for page in PdfReader(io.BytesIO(data)).pages:
        for run in text_runs(page):
            widths[round(run.size, 1)] += run.x1 - run.x0
    total = sum(widths.values()) or 1.0
    return {size: width / total for size, width in widths.most_common()}
