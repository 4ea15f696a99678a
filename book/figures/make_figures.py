"""Draw the course's architecture diagrams as SVG files (see README.md here).

Every diagram is a function below that returns an ``Svg``; ``main`` writes each
to ``book/figures/<name>.svg``. Edit a diagram here, then run

    python book/figures/make_figures.py

and commit the script and the SVG files together: ``tests/test_figures.py``
checks that the files are exactly what this script writes. The style (colours,
stroke widths, fonts, box shapes, arrows) is defined once, in the constants and
the ``Svg`` class, so every figure shares it. No network, no dependency beyond
the standard library.
"""

from __future__ import annotations

import html
import math
import re
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

# ---------------------------------------------------------------- the style
# Okabe-Ito colours (distinguishable with every common colour-vision deficiency).
INK = "#333333"  # plain data flow, text
GREY = "#777777"  # parameter-free operations, notes
QUERY = "#D55E00"  # queries (vermillion)
KEY = "#0072B2"  # keys (blue)
VALUE = "#009E73"  # values (bluish green)
STATE = "#CC79A7"  # hidden states of recurrent networks (reddish purple)
CONTEXT = "#E69F00"  # attention weights and their output, context vectors (orange)
POSITION = "#8C7E00"  # position information (stroke; fill is pale yellow)
COLOURS = {
    "ink": INK,
    "grey": GREY,
    "q": QUERY,
    "k": KEY,
    "v": VALUE,
    "h": STATE,
    "c": CONTEXT,
    "p": POSITION,
}
# Darker shades of the same hues for text, which needs more contrast than a line.
TEXT_COLOURS = {
    "q": "#B34E00",
    "k": "#0072B2",
    "v": "#007A59",
    "h": "#A8568A",
    "c": "#9A6700",
    "p": "#7A6E00",
}

SANS = "'Helvetica Neue', Helvetica, Arial, 'Liberation Sans', 'DejaVu Sans', sans-serif"
SERIF = (
    "'STIX Two Math', 'STIX Two Text', 'Cambria Math', Cambria, 'Latin Modern Math', "
    "'Times New Roman', 'Liberation Serif', 'DejaVu Serif', serif"
)
MONO = "'DejaVu Sans Mono', Menlo, Consolas, 'Liberation Mono', monospace"


def _fmt(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".")


# The figures are drawn about 800 px wide and shown at the book's content width
# (660-780 px on a desktop): text sizes below are multiplied by this factor.
FONT_SCALE = 1.1

STYLE = f"""
text {{ font-family: {SANS}; font-size: {_fmt(15 * FONT_SCALE)}px; fill: {INK}; }}
.m {{ font-family: {SERIF}; }}
.shape {{ font-family: {MONO}; font-size: 13px; fill: #555555; }}
.note {{ font-size: {_fmt(13 * FONT_SCALE)}px; fill: #555555; }}
.title {{ font-size: 15px; font-weight: bold; }}
.wire {{ fill: none; stroke-width: 1.6; stroke-linejoin: round; }}
.halo {{ fill: none; stroke: #fafafa; stroke-width: 7; }}
.dash {{ stroke-dasharray: 5 4; }}
.layer {{ fill: #ffffff; stroke: {INK}; stroke-width: 1.5; }}
.cell {{ fill: #f7e6f0; stroke: {STATE}; stroke-width: 1.5; }}
.attn {{ fill: #fcebd0; stroke: #b57d00; stroke-width: 1.5; }}
.ffn {{ fill: #e3ecf4; stroke: #5b7083; stroke-width: 1.5; }}
.norm {{ fill: #eeeeee; stroke: {GREY}; stroke-width: 1.5; }}
.op {{ fill: #ffffff; stroke: {GREY}; stroke-width: 1.5; }}
.pos {{ fill: #f8f1a6; stroke: {POSITION}; stroke-width: 1.5; }}
.frame {{ fill: #fafafa; stroke: #bbbbbb; stroke-width: 1.2; }}
.group {{ fill: none; stroke: #999999; stroke-width: 1.2; stroke-dasharray: 6 4; }}
.allow {{ fill: #ffffff; stroke: #999999; stroke-width: 1; }}
.block {{ fill: #666666; stroke: #999999; stroke-width: 1; }}
.frozen {{ fill: #eeeeee; stroke: {GREY}; stroke-width: 1.5; }}
.lora {{ fill: #e3f2fb; stroke: #56B4E9; stroke-width: 1.5; }}
"""

UPRIGHT = {
    "softmax",
    "tanh",
    "GRU",
    "LN",
    "MHA",
    "FFN",
    "Att",
    "Concat",
    "src",
    "tgt",
    "out",
    "model",
    "ff",
    "clip",
    "bucket",
    "exp",
    "final",
    "head",
    "BOS",
    "PE",
    "Linear",
    "sin",
    "cos",
    "LeakyReLU",
}


def _esc(s: str) -> str:
    return html.escape(s, quote=True)


SYMBOLS = {
    "alpha": "\u03b1",
    "sigma": "\u03c3",
    "omega": "\u03c9",
    "pi": "\u03c0",
    "theta": "\u03b8",
    "gbar": "\u1e21",
    "yhat": "\u0177",
    "sin": "sin",
    "cos": "cos",
    "exp": "exp",
    "cup": "\u222a",
    "sum": "\u2211",
    "odot": "\u2299",
    "sqrt": "\u221a",
    "top": "\u22a4",
    "infty": "\u221e",
    "cdot": "\u00b7",
    "cdots": "\u22ef",
    "le": "\u2264",
    "times": "\u00d7",
    "in": "\u2208",
    "mid": "|",
    "tanh": "tanh",
}


def _math_runs(s: str) -> list[tuple[str, bool, bool, int]]:
    """Split TeX-like math (``h_{t-1}``, ``W_Q^{(r)}``, ``\\rm{text}``) into runs of
    (text, italic, serif, level), level -1 for a subscript and +1 for a superscript."""
    s = s.replace("\\,", "\u2009").replace("\\tilde N", "\u00d1")
    s = s.replace("\\{", "\u007b").replace("\\}", "\u007d")
    s = re.sub(r"\\sqrt\{([^}]*)\}", "\u221a\\1", s)
    s = re.sub(r"\\([a-z]+)", lambda m: SYMBOLS.get(m.group(1), m.group(0)), s)
    runs: list[tuple[str, bool, bool, int]] = []

    def emit(chunk: str, level: int, upright_all: bool = False) -> None:
        chunk = chunk.replace("-", "\u2212")
        if upright_all:
            runs.append((chunk, False, False, level))
            return
        # runs of ASCII letters (a name, or one variable each), single other letters
        # (Greek, or a letter with an accent such as \u0177), anything else
        for piece in re.findall(r"[A-Za-z]+|[^\W\d_]|[\W\d_]+", chunk):
            if piece.isascii() and piece.isalpha() and piece in UPRIGHT:
                runs.append((piece, False, True, level))
            elif piece.isalpha():
                runs.append((piece, True, True, level))
            else:
                runs.append((piece, False, True, level))

    i = 0
    buf = ""
    while i < len(s):
        ch = s[i]
        if ch in "_^":
            emit(buf, 0)
            buf = ""
            level = -1 if ch == "_" else 1
            if s[i + 1] == "{":
                depth, j = 1, i + 2
                while depth:
                    depth += {"{": 1, "}": -1}.get(s[j], 0)
                    j += 1
                inner, i = s[i + 2 : j - 1], j
            else:
                inner, i = s[i + 1], i + 2
            for part in re.split(r"(\\rm\{[^}]*\})", inner):
                if part.startswith("\\rm{"):
                    emit(part[4:-1], level, upright_all=True)
                elif part:
                    emit(part, level)
        elif s.startswith("\\rm{", i):
            emit(buf, 0)
            buf = ""
            j = s.index("}", i)
            emit(s[i + 4 : j], 0, upright_all=True)
            i = j + 1
        else:
            buf += ch
            i += 1
    emit(buf, 0)
    return [r for r in runs if r[0]]


def rich(s: str, size: float) -> str:
    """Text with ``$math$`` spans as SVG tspans (math in the serif font, variables
    italic, sub- and superscripts shifted), for a ``<text>`` of font size ``size``."""
    runs: list[tuple[str, bool, bool, int]] = []
    for n, part in enumerate(s.split("$")):
        if n % 2:
            runs.extend(_math_runs(part))
        elif part:
            runs.append((part, False, False, 0))
    out, offset = [], 0.0
    for text, italic, serif, level in runs:
        target = {0: 0.0, -1: 0.3 * size, 1: -0.4 * size}[level]
        attrs = []
        if serif:
            attrs.append('class="m"')
        if italic:
            attrs.append('font-style="italic"')
        if level:
            attrs.append(f'font-size="{0.72 * size:.1f}"')
        if target != offset:
            attrs.append(f'dy="{target - offset:.1f}"')
            offset = target
        if serif and not level:
            attrs.append(f'font-size="{1.1 * size:.1f}"')
        out.append(f"<tspan {' '.join(attrs)}>{_esc(text)}</tspan>" if attrs else _esc(text))
    return "".join(out)


class Svg:
    """One diagram: shapes are added in drawing order, coordinates in px."""

    def __init__(self, name: str, width: int, height: int, title: str, desc: str):
        self.name, self.width, self.height = name, width, height
        self.title, self.desc = title, desc
        self.items: list[str] = []

    # ---- primitives
    def text(self, x, y, s, size=15, anchor="middle", cls="", weight="", fill=""):
        size = size * FONT_SCALE
        attrs = f'x="{_fmt(x)}" y="{_fmt(y)}" text-anchor="{anchor}"'
        if cls:
            attrs += f' class="{cls}"'
        style = []  # a style attribute, since the CSS rules would override attributes
        if size != 15 * FONT_SCALE:
            style.append(f"font-size: {_fmt(size)}px")
        if weight:
            style.append(f"font-weight: {weight}")
        if fill:
            style.append(f"fill: {TEXT_COLOURS.get(fill, COLOURS.get(fill, fill))}")
        if style:
            attrs += f' style="{"; ".join(style)}"'
        self.items.append(f"<text {attrs}>{rich(s, size)}</text>")

    def shape(self, x, y, s, anchor="middle"):
        """A tensor shape in code notation, e.g. ``[B, T, D]``."""
        self.items.append(
            f'<text x="{_fmt(x)}" y="{_fmt(y)}" text-anchor="{anchor}" class="shape">'
            f"{_esc(s)}</text>"
        )

    def box(self, cx, cy, w, h, label="", cls="layer", size=15, rx=6, stroke=""):
        """A rounded rectangle centred on (cx, cy), with an optional centred label."""
        extra = f' style="stroke: {COLOURS.get(stroke, stroke)}"' if stroke else ""
        self.items.append(
            f'<rect x="{_fmt(cx - w / 2)}" y="{_fmt(cy - h / 2)}" width="{_fmt(w)}" '
            f'height="{_fmt(h)}" rx="{_fmt(rx)}" class="{cls}"{extra}/>'
        )
        if label:
            lines = label.split("\n")
            top = cy - (len(lines) - 1) * 0.6 * size
            for n, line in enumerate(lines):
                self.text(cx, top + n * 1.2 * size + 0.35 * size, line, size=size)

    def pill(self, cx, cy, w, label, size=15, h=30, cls="op"):
        """A parameter-free operation (softmax, scale, matrix product)."""
        self.box(cx, cy, w, h, label, cls=cls, size=size, rx=h / 2)

    def rect(self, x, y, w, h, cls, rx=0):
        self.items.append(
            f'<rect x="{_fmt(x)}" y="{_fmt(y)}" width="{_fmt(w)}" height="{_fmt(h)}" '
            f'rx="{_fmt(rx)}" class="{cls}"/>'
        )

    def op(self, cx, cy, kind, r=10, colour="grey"):
        """A circled element-wise operation: '+', 'odot' (Hadamard product)."""
        c = COLOURS.get(colour, colour)
        self.items.append(
            f'<circle cx="{_fmt(cx)}" cy="{_fmt(cy)}" r="{_fmt(r)}" fill="#ffffff" '
            f'stroke="{c}" stroke-width="1.5"/>'
        )
        if kind == "+":
            d = r * 0.6
            self.items.append(
                f'<path d="M{_fmt(cx - d)},{_fmt(cy)} H{_fmt(cx + d)} '
                f'M{_fmt(cx)},{_fmt(cy - d)} V{_fmt(cy + d)}" stroke="{c}" stroke-width="1.6"/>'
            )
        elif kind == "odot":
            self.items.append(
                f'<circle cx="{_fmt(cx)}" cy="{_fmt(cy)}" r="{_fmt(r * 0.28)}" fill="{c}"/>'
            )
        else:
            self.text(cx, cy + 5, kind, size=13)

    def dot(self, x, y, colour="ink"):
        """A junction: the wire splits here."""
        c = COLOURS.get(colour, colour)
        self.items.append(f'<circle cx="{_fmt(x)}" cy="{_fmt(y)}" r="3.2" fill="{c}"/>')

    def wire(self, points, colour="ink", head=True, dash=False, halo=False, width=None):
        """A polyline through ``points``; an arrowhead at the end unless ``head=False``.
        ``halo`` draws a white band under it, so that it visibly passes over
        the wires it crosses."""
        d = "M" + " L".join(f"{_fmt(x)},{_fmt(y)}" for x, y in points)
        if halo:
            self.items.append(f'<path d="{d}" class="halo"/>')
        c = COLOURS.get(colour, colour)
        cls = "wire dash" if dash else "wire"
        # a style, not a stroke-width attribute: the stylesheet's .wire rule beats an
        # attribute in the CSS cascade, so an attribute would render at 1.6 px
        extra = f' style="stroke-width: {_fmt(width)}"' if width else ""
        marker = f' marker-end="url(#ah-{colour})"' if head else ""
        self.items.append(f'<path d="{d}" class="{cls}" stroke="{c}"{extra}{marker}/>')

    def raw(self, s: str) -> None:
        self.items.append(s)

    # ---- output
    def render(self) -> str:
        markers = "\n".join(
            f'<marker id="ah-{k}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="10.4" '
            f'markerHeight="10.4" markerUnits="userSpaceOnUse" orient="auto-start-reverse">'
            f'<path d="M0,1 L10,5 L0,9 z" fill="{c}"/></marker>'
            for k, c in COLOURS.items()
        )
        body = "\n".join(self.items)
        return (
            f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {self.width} {self.height}" '
            f'width="{self.width}" height="{self.height}" role="img" '
            f'aria-labelledby="{self.name}-title {self.name}-desc" xml:space="preserve">\n'
            f'<title id="{self.name}-title">{_esc(self.title)}</title>\n'
            f'<desc id="{self.name}-desc">{_esc(self.desc)}</desc>\n'
            f"<!-- Generated by book/figures/make_figures.py: edit that script, not this file. -->\n"
            f"<defs>\n<style>{STYLE}</style>\n{markers}\n</defs>\n"
            f'<rect width="{self.width}" height="{self.height}" fill="#ffffff"/>\n'
            f"{body}\n</svg>\n"
        )


FIGURES = []


def figure(fn):
    FIGURES.append(fn)
    return fn


# ------------------------------------------------------------- the figures
@figure
def rnn_unrolled() -> Svg:
    f = Svg(
        "rnn_unrolled",
        800,
        275,
        "A recurrent network, folded and unrolled over time",
        "Left: one RNN cell reads the input x_t and its own previous state h_{t-1} and "
        "writes the new state h_t. Right: the same cell unrolled over T steps, starting "
        "from h_0 = 0; each step passes its state to the next, and all steps share the "
        "same weights W_ih and W_hh.",
    )
    # folded
    f.box(85, 125, 70, 44, "RNN", cls="cell")
    f.wire([(85, 205), (85, 149)])
    f.text(85, 228, "$x_t$")
    f.shape(93, 190, "[B, D]", anchor="start")
    f.wire([(85, 103), (85, 55)], colour="h")
    f.text(85, 43, "$h_t$")
    f.shape(93, 80, "[B, H]", anchor="start")
    f.wire([(120, 112), (152, 112), (152, 140), (122, 140)], colour="h")
    f.text(159, 131, "$h_{t-1}$", anchor="start")
    # unroll
    f.wire([(202, 125), (242, 125)], colour="grey")
    f.text(222, 112, "unroll", size=13, cls="note")
    xs = [375, 485, 595, 740]
    names = ["1", "2", "3", "T"]
    f.text(308, 130, "$h_0 = 0$", anchor="end")
    f.wire([(313, 125), (341, 125)], colour="h")
    for x, t in zip(xs, names, strict=True):
        f.box(x, 125, 64, 44, "RNN", cls="cell")
        f.wire([(x, 205), (x, 149)])
        f.text(x, 228, f"$x_{t}$")
        f.wire([(x, 103), (x, 55)], colour="h")
        f.text(x, 43, f"$h_{t}$")
    for a, b in ((xs[0], xs[1]), (xs[1], xs[2])):
        f.wire([(a + 32, 125), (b - 34, 125)], colour="h")
    f.wire([(xs[2] + 32, 125), (650, 125)], colour="h")
    f.text(668, 131, "\u22ef", size=18)
    f.wire([(686, 125), (xs[3] - 34, 125)], colour="h")
    f.wire([(343, 243), (343, 250), (772, 250), (772, 243)], colour="grey", head=False)
    f.text(
        557,
        268,
        "the same weights $W_{ih}$, $W_{hh}$ (and biases) at every step",
        size=14,
        cls="note",
    )
    return f


@figure
def lstm_cell() -> Svg:
    f = Svg(
        "lstm_cell",
        760,
        360,
        "The LSTM cell",
        "The cell state C runs along the top: it is multiplied by the forget gate f_t and "
        "receives the product of the input gate i_t and the candidate g_t. The four gates "
        "f_t, i_t, g_t (tanh) and o_t are each computed from x_t and h_{t-1}. The new "
        "state h_t is o_t times tanh of the new cell state C_t.",
    )
    f.rect(110, 40, 540, 262, "frame", rx=14)
    f.text(640, 292, "LSTM cell", size=13, anchor="end", cls="note")
    # the cell state: the additive path
    f.wire([(30, 80), (218, 80)], colour="h", width=3.2)
    f.wire([(242, 80), (358, 80)], colour="h", width=3.2)
    f.wire([(382, 80), (730, 80)], colour="h", width=3.2)
    f.op(230, 80, "odot")
    f.op(370, 80, "+")
    f.text(30, 66, "$C_{t-1}$", anchor="start")
    f.text(730, 66, "$C_t$", anchor="end")
    # inputs: h_{t-1} and x_t feed every gate
    f.wire([(30, 265), (160, 265)], colour="h", head=False)
    f.text(30, 253, "$h_{t-1}$", anchor="start")
    f.wire([(160, 325), (160, 265)], head=False)
    f.text(160, 343, "$x_t$")
    f.wire([(160, 265), (470, 265)], head=False)
    f.dot(160, 265)
    for x in (230, 300, 370):
        f.dot(x, 265)
    for x in (230, 300, 370, 470):
        f.wire([(x, 265), (x, 217)])
    f.box(230, 200, 40, 30, "$\u03c3$", cls="layer")
    f.box(300, 200, 40, 30, "$\u03c3$", cls="layer")
    f.box(370, 200, 52, 30, "tanh", cls="layer", size=14)
    f.box(470, 200, 40, 30, "$\u03c3$", cls="layer")
    # gate outputs
    f.wire([(230, 185), (230, 92)])
    f.text(238, 140, "$f_t$", anchor="start")
    f.wire([(300, 185), (300, 150), (358, 150)])
    f.text(306, 142, "$i_t$", anchor="start")
    f.wire([(370, 185), (370, 162)])
    f.text(378, 179, "$g_t$", anchor="start")
    f.op(370, 150, "odot")
    f.wire([(370, 138), (370, 92)])
    # output: h_t = o_t * tanh(C_t)
    f.dot(560, 80, "h")
    f.wire([(560, 80), (560, 120)], colour="h")
    f.pill(560, 135, 54, "tanh", size=14, h=28)
    f.wire([(560, 149), (560, 188)])
    f.wire([(490, 200), (548, 200)])
    f.text(512, 192, "$o_t$")
    f.op(560, 200, "odot")
    f.wire([(560, 212), (560, 265), (730, 265)], colour="h")
    f.text(730, 253, "$h_t$", anchor="end")
    f.text(
        200,
        330,
        "boxes: learned layers of $x_t$ and $h_{t-1}$, each with its own weights;",
        size=13,
        cls="note",
        anchor="start",
    )
    f.text(
        200,
        349,
        "gates: $f$ forget, $i$ input, $o$ output; $g$ candidate; \u2299 element-wise product",
        size=13,
        cls="note",
        anchor="start",
    )
    return f


@figure
def gru_cell() -> Svg:
    f = Svg(
        "gru_cell",
        760,
        360,
        "The GRU cell, in PyTorch's form",
        "One state h runs along the top. The reset gate r_t and the update gate z_t are "
        "computed from x_t and h_{t-1}. The reset gate multiplies W_hn h_{t-1} + b_hn, after "
        "the matrix product, and the candidate n_t is tanh of that plus a layer of x_t. The "
        "new state is (1 - z_t) times n_t plus z_t times h_{t-1}.",
    )
    f.rect(110, 35, 540, 267, "frame", rx=14)
    f.text(640, 292, "GRU cell", size=13, anchor="end", cls="note")
    # the state
    f.wire([(30, 70), (468, 70)], colour="h", head=False)
    f.wire([(468, 70), (469, 70)], colour="h")
    f.op(480, 70, "odot")
    f.wire([(492, 70), (598, 70)], colour="h")
    f.op(610, 70, "+")
    f.wire([(622, 70), (730, 70)], colour="h")
    f.text(30, 56, "$h_{t-1}$", anchor="start")
    f.text(730, 56, "$h_t$", anchor="end")
    # h_{t-1} and x_t feed both gates
    f.dot(140, 70, "h")
    f.wire([(140, 70), (140, 250), (170, 250)], colour="h", head=False)
    f.wire([(170, 330), (170, 250)], head=False)
    f.text(170, 348, "$x_t$")
    f.dot(170, 250)
    f.wire([(170, 250), (480, 250), (480, 217)])
    f.dot(250, 250)
    f.wire([(250, 250), (250, 217)])
    f.box(250, 200, 40, 30, "$\u03c3$")
    f.box(480, 200, 40, 30, "$\u03c3$")
    # the candidate: reset gate applied after the product, (1.10)
    f.dot(330, 70, "h")
    f.wire([(330, 70), (330, 102)], colour="h")
    f.box(330, 120, 150, 32, "$W_{hn} h_{t-1} + b_{hn}$", size=14)
    f.wire([(330, 136), (330, 158)])
    f.wire([(250, 185), (250, 170), (318, 170)])
    f.text(262, 162, "$r_t$", anchor="start")
    f.op(330, 170, "odot")
    f.wire([(342, 170), (378, 170)])
    f.wire([(170, 280), (410, 280), (410, 187)], halo=True)
    f.dot(170, 280)
    f.box(410, 170, 60, 30, "tanh", size=14)
    # h_t = (1 - z_t) n_t + z_t h_{t-1}, (1.11)
    f.wire([(480, 185), (480, 82)])
    f.text(488, 145, "$z_t$", anchor="start")
    f.dot(480, 110)
    f.wire([(480, 110), (531, 110)])
    f.op(545, 110, "1\u2212", r=13)
    f.wire([(558, 110), (598, 110)])
    f.op(610, 110, "odot")
    f.wire([(440, 170), (610, 170), (610, 122)], halo=True)
    f.text(540, 162, "$n_t$")
    f.wire([(610, 98), (610, 82)])
    f.text(
        200,
        330,
        "boxes: learned layers, each with its own weights; \u2299 element-wise product",
        size=13,
        cls="note",
        anchor="start",
    )
    f.text(
        200,
        349,
        "gates: $r$ reset, $z$ update; $n$ candidate, its reset applied after $W_{hn}$",
        size=13,
        cls="note",
        anchor="start",
    )
    return f


def _encoder_row(f: Svg, xs, y, labels, state="h") -> None:
    """Three GRU cells at ``xs`` (an ellipsis between the second and the third),
    reading ``labels`` from below and passing their state to the right."""
    for x, lab in zip(xs, labels, strict=True):
        f.box(x, y, 60, 40, "GRU", cls="cell")
        f.wire([(x, y + 80), (x, y + 22)])
        f.text(x, y + 100, lab)
    f.wire([(xs[0] + 30, y), (xs[1] - 32, y)], colour=state)
    f.wire([(xs[1] + 30, y), (xs[1] + 52, y)], colour=state)
    f.text((xs[1] + xs[2]) / 2, y + 6, "\u22ef", size=18)
    f.wire([(xs[2] - 52, y), (xs[2] - 32, y)], colour=state)


@figure
def seq2seq_bottleneck() -> Svg:
    f = Svg(
        "seq2seq_bottleneck",
        820,
        310,
        "An encoder-decoder with a single context vector",
        "The encoder GRU reads x_1 to x_T; only its last state h_T is kept, as the context "
        "vector c. The decoder GRU starts from s_0 = c and writes y_1, y_2, ..., reading "
        "the previous symbol (BOS first) and predicting each next symbol with a softmax "
        "layer. The earlier encoder states h_1, h_2, ... are not used by the decoder.",
    )
    y = 160
    f.rect(30, 52, 330, 240, "group", rx=10)
    f.rect(494, 28, 318, 264, "group", rx=10)
    f.text(40, 285, "encoder (1.13)", size=13, cls="note", anchor="start")
    f.text(802, 285, "decoder (1.14)-(1.15)", size=13, cls="note", anchor="end")
    enc = [75, 175, 315]
    _encoder_row(f, enc, y, ["$x_1$", "$x_2$", "$x_T$"])
    for x, t in zip(enc[:2], "12", strict=True):
        f.wire([(x, y - 22), (x, y - 62)], colour="grey", dash=True)
        f.text(x, y - 70, f"$h_{t}$", fill="grey")
    f.text(125, 72, "not used by the decoder", size=13, cls="note")
    # the bottleneck
    f.wire([(345, y), (388, y)], colour="h")
    f.box(422, y, 64, 44, "$c = h_T$", cls="attn", stroke="c")
    f.shape(422, y + 40, "[B, H]")
    f.text(422, y + 58, "one vector,", size=13, cls="note")
    f.text(422, y + 74, "whatever $T$", size=13, cls="note")
    f.wire([(454, y), (503, y)], colour="c")
    f.text(475, y - 8, "$s_0$")
    dec = [535, 635, 765]
    _encoder_row(f, dec, y, ["BOS", "$y_1$", "$y_{i-1}$"])
    for x, t in zip(dec, ["1", "2", "i"], strict=True):
        f.wire([(x, y - 22), (x, y - 50)])
        f.box(x, y - 63, 74, 24, "softmax", size=13)
        f.wire([(x, y - 75), (x, y - 95)])
        f.text(x, y - 103, f"$p(y_{t})$")
    return f


@figure
def seq2seq_attention() -> Svg:
    f = Svg(
        "seq2seq_attention",
        820,
        390,
        "An encoder-decoder with attention",
        "The encoder GRU reads x_1 to x_S and every state h_1, h_2, ..., h_S is kept. At "
        "decoder step i the decoder's query q_i scores every h_j; the softmax of the scores "
        "gives the weights alpha_ij (drawn as line widths), and the context c_i, the "
        "weighted sum of the h_j, goes back to step i. A new context is computed at every "
        "output step.",
    )
    y = 250
    enc = [75, 175, 315]
    _encoder_row(f, enc, y, ["$x_1$", "$x_2$", "$x_S$"])
    f.text(30, 382, "encoder", size=13, cls="note", anchor="start")
    widths = [1.4, 5.5, 2.2]
    ax, ay = 470, 72
    for x, j, w in zip(enc, ["1", "2", "S"], widths, strict=True):
        f.wire([(x, y - 22), (x, y - 58)], colour="h")
        f.box(x, y - 74, 44, 30, f"$h_{j}$", stroke="h")
        # up first, then across: each label sits beside its own wire's vertical part
        f.wire([(x, y - 89), (x, y - 120), (ax - 40, ay + 22)], colour="c", head=False, width=w)
        f.text(x - 7, y - 97, f"$\\alpha_{{i{j}}}$", anchor="end", fill="c")
    f.box(ax, ay, 130, 44, "$c_i = \\sum_j \\alpha_{ij} h_j$", cls="attn")
    f.text(ax, ay + 40, "(2.3)", size=13, cls="note")
    f.text(
        30,
        28,
        "all states kept: each $h_j$ is a key and a value",
        size=13,
        cls="note",
        anchor="start",
    )
    f.text(
        800,
        28,
        "$q_i$ scores every $h_j$ (2.1), a softmax gives $\\alpha_{ij}$ (2.2)",
        size=13,
        cls="note",
        anchor="end",
    )
    # the decoder, step i
    dec = [520, 620, 758]
    _encoder_row(f, dec, y, ["BOS", "$y_1$", "$y_{i-1}$"])
    f.text(800, 382, "decoder, step $i$", size=13, cls="note", anchor="end")
    f.wire([(776, y - 22), (776, 62), (537, 62)], colour="q")
    f.text(784, 150, "$q_i$", anchor="start", fill="q")
    f.wire([(535, 84), (740, 84), (740, y - 22)], colour="c")
    f.text(732, 150, "$c_i$", anchor="end", fill="c")
    return f


@figure
def bahdanau_luong() -> Svg:
    f = Svg(
        "bahdanau_luong",
        820,
        440,
        "Bahdanau's and Luong's decoders side by side",
        "One decoder step in each model. Left, Bahdanau: the previous state s_{i-1} is the "
        "query; the context c_i is an input of the GRU, next to E y_{i-1}, and of the "
        "output layer W_out [s_i; c_i]. Right, Luong: the GRU steps first; its new state "
        "s_i is the query, and the context is combined with s_i after the recurrence, "
        "tanh(W_c [c_i; s_i]), before the output layer W_s.",
    )
    hy, ay, cy, top = 100, 180, 315, 395
    for ox, kind in ((5, "bahdanau"), (415, "luong")):
        f.rect(ox, 8, 400, 424, "frame", rx=12)
        if kind == "bahdanau":
            f.text(ox + 200, 30, "Bahdanau (2.9)-(2.10)", weight="bold")
            f.text(ox + 200, 52, "query $s_{i-1}$, context into the GRU", size=14)
        else:
            f.text(ox + 200, 30, "Luong (2.11)-(2.12)", weight="bold")
            f.text(ox + 200, 52, "query $s_i$, context used after the GRU", size=14)
        # encoder states, the keys and values
        for x, j in ((90, "1"), (140, "2"), (210, "S")):
            f.box(ox + x, hy, 36, 28, f"$h_{j}$", size=14, stroke="h")
            f.wire([(ox + x, hy + 14), (ox + x, ay - 20)], colour="h")
        f.text(ox + 175, hy + 5, "\u22ef", size=16)
        f.box(ox + 145, ay, 150, 36, "attention", cls="attn")
        cx = ox + (200 if kind == "bahdanau" else 130)
        f.box(cx, cy, 70, 44, "GRU", cls="cell")
        f.wire([(ox + 15, cy), (cx - 37, cy)], colour="h")
        f.text(ox + 18, cy - 10, "$s_{i-1}$", anchor="start")
        f.wire([(cx + 35, cy), (ox + 388, cy)], colour="h")
        f.text(ox + 388, cy - 10, "$s_i$", anchor="end")
        f.wire([(cx, top), (cx, cy + 24)])
        f.text(cx, top + 18, "$E\\,y_{i-1}$")
        if kind == "bahdanau":
            f.dot(ox + 80, cy, "h")
            f.wire([(ox + 80, cy), (ox + 80, ay + 20)], colour="q")
            f.text(ox + 88, 255, "$q_i = s_{i-1}$", anchor="start", fill="q")
            f.wire([(ox + 190, ay + 18), (ox + 190, cy - 24)], colour="c")
            f.text(ox + 198, 268, "$c_i$", anchor="start", fill="c")
            f.dot(ox + 190, 230, "c")
            f.wire([(ox + 190, 230), (ox + 263, 230)], colour="c")
            f.dot(ox + 325, cy, "h")
            f.wire([(ox + 325, cy), (ox + 325, 252)], colour="h")
            f.box(ox + 325, 230, 120, 40, "$W_{\\rm{out}}[s_i; c_i]$", size=14)
            f.wire([(ox + 325, 210), (ox + 325, 150)])
            f.text(ox + 325, 140, "$p(y_i)$")
            f.text(ox + 333, 180, "softmax", size=13, cls="note", anchor="start")
        else:
            f.dot(ox + 200, cy, "h")
            f.wire([(ox + 200, cy), (ox + 200, ay + 20)], colour="q")
            f.text(ox + 208, 255, "$q_i = s_i$", anchor="start", fill="q")
            f.wire([(ox + 220, ay), (ox + 254, ay)], colour="c")
            f.text(ox + 237, ay - 10, "$c_i$", fill="c")
            f.box(ox + 324, ay, 136, 36, "$\\tanh(W_c[c_i; s_i])$", size=14)
            f.dot(ox + 325, cy, "h")
            f.wire([(ox + 325, cy), (ox + 325, ay + 20)], colour="h")
            f.wire([(ox + 325, ay - 18), (ox + 325, 98)])
            f.text(ox + 317, 140, "$W_s$, softmax", size=13, cls="note", anchor="end")
            f.text(ox + 325, 86, "$p(y_i)$")
    return f


@figure
def scaled_dot_product() -> Svg:
    f = Svg(
        "scaled_dot_product",
        820,
        300,
        "Scaled dot-product attention, with shapes",
        "The input X of shape [B, T, D] is projected by W_Q, W_K and W_V into queries Q "
        "[B, T, d], keys K [B, S, d] and values V [B, S, d]. The scores Q K^T [B, T, S] are "
        "divided by the square root of d_k, the mask M is added, and a softmax over the S "
        "keys gives the weights alpha [B, T, S], which multiply V to give the output "
        "[B, T, d].",
    )
    rows = {"q": 70, "k": 150, "v": 232}
    f.text(38, 156, "$X$", size=17)
    f.shape(4, 180, "[B, T, D]", anchor="start")
    f.wire([(52, 150), (80, 150)], head=False)
    f.dot(80, 150)
    for role, name in (("q", "Q"), ("k", "K"), ("v", "V")):
        y = rows[role]
        f.wire([(80, 150), (80, y), (103, y)])
        f.box(130, y, 50, 32, f"$W_{name}$", stroke=role)
    f.text(130, 268, "(3.1)", size=13, cls="note")
    # scores
    f.wire([(155, 70), (300, 70), (300, 93)], colour="q")
    f.text(200, 62, "$Q$", fill="q")
    f.shape(200, 88, "[B, T, d]")
    f.wire([(155, 150), (300, 150), (300, 127)], colour="k")
    f.text(200, 142, "$K$", fill="k")
    f.shape(200, 168, "[B, S, d]")
    f.pill(300, 110, 70, "$QK^\\top$", size=14)
    f.wire([(335, 110), (373, 110)])
    f.pill(410, 110, 70, "$/\\sqrt{d_k}$", size=14)
    f.shape(410, 140, "[B, T, S]")
    f.wire([(445, 110), (478, 110)])
    f.op(490, 110, "+")
    f.text(490, 40, "$M$")
    f.shape(490, 58, "[T, S]")
    f.wire([(490, 64), (490, 98)])
    f.text(498, 85, "mask", size=13, cls="note", anchor="start")
    f.wire([(502, 110), (538, 110)])
    f.pill(578, 110, 76, "softmax", size=14)
    f.text(578, 140, "over the $S$ keys", size=13, cls="note")
    # weights times values
    f.wire([(616, 110), (690, 110), (690, 153)], colour="c")
    f.text(655, 102, "$\\alpha$", fill="c")
    f.shape(700, 136, "[B, T, S]", anchor="start")
    f.wire([(155, 232), (690, 232), (690, 187)], colour="v")
    f.text(200, 224, "$V$", fill="v")
    f.shape(200, 250, "[B, S, d]")
    f.pill(690, 170, 56, "$\\alpha V$", size=14)
    f.wire([(718, 170), (795, 170)], colour="c")
    f.text(757, 160, "output", size=13, cls="note")
    f.shape(757, 188, "[B, T, d]")
    f.text(
        410,
        290,
        "(3.2); self-attention: $K$, $V$ from the same $X$ ($S = T$); "
        "cross-attention: from another sequence",
        size=13,
        cls="note",
    )
    return f


@figure
def multi_head() -> Svg:
    f = Svg(
        "multi_head",
        860,
        320,
        "Multi-head attention, with shapes",
        "The query, key and value inputs (width D) are each projected by one D x D matrix "
        "W_Q, W_K, W_V whose h column blocks are the heads' projections, and reshaped into h "
        "heads of width d = D / h. Each head runs scaled dot-product attention on its own "
        "slice. The h outputs are concatenated back to width D and mixed by W_O.",
    )
    rows = (
        ("q", "Q", 70, "[B, T, D]", "[B, h, T, d]"),
        ("k", "K", 150, "[B, S, D]", "[B, h, S, d]"),
        ("v", "V", 230, "[B, S, D]", "[B, h, S, d]"),
    )
    # the stack of heads
    for dx, cls in ((16, "frame"), (8, "frame"), (0, "attn")):
        f.rect(370 + dx, 40 - dx, 150, 220, cls, rx=10)
    f.text(445, 128, "scaled dot-product", size=14)
    f.text(445, 148, "attention (3.2)", size=14)
    f.text(445, 172, "in each head", size=13, cls="note")
    f.text(453, 22, "$h$ heads, run together", size=13, cls="note")
    for role, name, y, shape_in, shape_head in rows:
        f.text(22, y + 6, f"${name}$", anchor="start", fill=role)
        f.wire([(40, y), (113, y)], colour=role)
        f.shape(76, y - 10, shape_in)
        f.box(150, y, 70, 36, f"$W_{name}$", stroke=role)
        for x in (132.5, 167.5):
            f.wire([(x, y - 18), (x, y - 10)], colour="grey", head=False)
            f.wire([(x, y + 10), (x, y + 18)], colour="grey", head=False)
        f.wire([(185, y), (368, y)], colour=role)
        f.shape(277, y - 10, shape_head)
    f.text(150, 275, "one $D \\times D$ matrix each; its $h$", size=13, cls="note")
    f.text(150, 292, "column blocks are the heads' $W^{(r)}$", size=13, cls="note")
    f.text(277, 256, "$d = D / h$", size=13, cls="note")
    # concatenate and mix
    f.wire([(520, 150), (605, 150)], colour="c")
    f.shape(578, 140, "[B,h,T,d]")
    f.pill(640, 150, 66, "concat", size=14)
    f.wire([(673, 150), (733, 150)], colour="c")
    f.shape(703, 140, "[B,T,D]")
    f.box(760, 150, 50, 36, "$W_O$")
    f.wire([(785, 150), (850, 150)], colour="c")
    f.text(815, 140, "output", size=13, cls="note")
    f.shape(818, 180, "[B, T, D]")
    f.text(
        620,
        292,
        "(3.6); parameters $4D^2 + 4D$ (with biases) for any $h$",
        size=13,
        cls="note",
    )
    return f


def _mask_grid(f: Svg, x0, y0, allowed, size=26, numbers=True) -> None:
    """A boolean mask as a grid: rows are queries i, columns keys j (0-based, as the
    chapters' plots number positions)."""
    n = len(allowed)
    for i in range(n):
        for j in range(len(allowed[i])):
            x, y = x0 + j * size, y0 + i * size
            ok = allowed[i][j]
            f.rect(x, y, size, size, "allow" if ok else "block")
            if size >= 24:
                f.text(
                    x + size / 2,
                    y + size / 2 + 4,
                    "0" if ok else "\u2212\u221e",
                    size=11,
                    fill="#999999" if ok else "#ffffff",
                )
    if numbers:
        for j in range(len(allowed[0])):
            f.text(x0 + j * size + size / 2, y0 - 6, str(j), size=11, cls="note")
        for i in range(n):
            f.text(x0 - 6, y0 + i * size + size / 2 + 4, str(i), size=11, cls="note", anchor="end")


@figure
def masks() -> Svg:
    f = Svg(
        "masks",
        820,
        290,
        "Padding and causal masks",
        "A batch of two sequences of lengths 5 and 3, padded to 5. The padding mask [B, S] is "
        "True at real tokens; for the second sequence it blocks keys 3 and 4 (counting from "
        "0) for every query. The causal mask lets query i see keys j <= i. Combined, query i "
        "of the second sequence sees keys 0 to min(i, 2). Blocked entries add minus infinity to the scores, "
        "allowed ones add 0.",
    )
    n = 5
    pad = [[j < 3 for j in range(n)] for _ in range(n)]
    causal = [[j <= i for j in range(n)] for i in range(n)]
    both = [[pad[i][j] and causal[i][j] for j in range(n)] for i in range(n)]
    # the [B, S] padding mask of the batch
    f.text(110, 36, "padding mask", weight="bold")
    f.shape(110, 56, "[B, S]")
    for b, length in enumerate((5, 3)):
        y = 110 + b * 34
        f.text(72, y + 16, f"length {length}", size=13, cls="note", anchor="end")
        for j in range(n):
            f.rect(78 + j * 22, y, 22, 22, "allow" if j < length else "block")
    f.text(133, 190, "True at real tokens", size=13, cls="note")
    f.wire([(194, 155), (226, 155)], colour="grey")
    # the [T, S] masks of the second sequence
    grids = ((240, "padding, sequence 2", pad), (450, "causal (3.4)", causal), (660, "both", both))
    for x0, title, allowed in grids:
        f.text(x0 + 65, 36, title, weight="bold")
        f.text(x0 + 65, 58, "keys $j$ \u2192", size=13, cls="note")
        _mask_grid(f, x0, 80, allowed)
    f.text(412, 150, "and", size=14)
    f.text(622, 150, "=", size=20)
    f.text(232, 232, "queries $i$ \u2193", size=13, cls="note", anchor="start")
    # legend
    f.rect(240, 254, 16, 16, "allow")
    f.text(262, 267, "True: may attend, adds 0", size=13, anchor="start")
    f.rect(470, 254, 16, 16, "block")
    f.text(492, 267, "False: blocked, adds $-\\infty$ (3.3)", size=13, anchor="start")
    return f


def _sublayer(f: Svg, x, y_in, label, cls, side, w=204, h=34, post=False) -> float:
    """One sub-layer drawn bottom to top from ``y_in``, with its residual bypass on
    the ``side`` x coordinate: pre-norm (LN, sub-layer, +) or post-norm (sub-layer,
    +, LN). Returns the y where its output leaves."""
    y_ln, y_box, y_add = y_in - 32, y_in - 78, y_in - 120
    if post:
        y_box, y_add, y_ln = y_in - 40, y_in - 90, y_in - 132
    f.dot(x, y_in)
    f.wire([(x, y_in), (side, y_in), (side, y_add), (x + (10 if side > x else -10), y_add)])
    if post:
        f.wire([(x, y_in), (x, y_box + h / 2)])
        f.box(x, y_box, w, h, label, cls=cls, size=14)
        f.wire([(x, y_box - h / 2), (x, y_add + 10)])
        f.op(x, y_add, "+")
        f.wire([(x, y_add - 10), (x, y_ln + 13)])
        f.box(x, y_ln, 56, 26, "LN", cls="norm", size=14)
        return y_ln - 13
    f.wire([(x, y_in), (x, y_ln + 13)])
    f.box(x, y_ln, 56, 26, "LN", cls="norm", size=14)
    f.wire([(x, y_ln - 13), (x, y_box + h / 2)])
    f.box(x, y_box, w, h, label, cls=cls, size=14)
    f.wire([(x, y_box - h / 2), (x, y_add + 10)])
    f.op(x, y_add, "+")
    return y_add - 10


@figure
def transformer() -> Svg:
    f = Svg(
        "transformer",
        820,
        770,
        "The Transformer encoder-decoder, pre-norm",
        "Left, the encoder: token embeddings plus positions, then L encoder blocks, each a "
        "multi-head self-attention sub-layer and a feed-forward sub-layer, each preceded by a "
        "layer norm and wrapped in a residual connection; a final layer norm gives the memory "
        "M. Right, the decoder: embeddings plus positions, then L decoder blocks with causal "
        "self-attention, cross-attention whose keys and values come from M, and a "
        "feed-forward sub-layer; a final layer norm, a linear layer and a softmax give the "
        "next-token probabilities.",
    )
    ex, dx = 250, 570
    for x, tokens in ((ex, "source tokens"), (dx, "target tokens, shifted (BOS first)")):
        f.text(x, 755, tokens, size=14)
        f.wire([(x, 738), (x, 718)])
        f.box(x, 702, 150, 32, "embedding", size=14)
        f.wire([(x, 686), (x, 667)])
        f.op(x, 657, "+")
        f.wire([(x, 647), (x, 625)], head=False)
    f.box(118, 657, 96, 28, "positions", cls="pos", size=14)
    f.wire([(166, 657), (240, 657)], colour="p")
    f.box(702, 657, 96, 28, "positions", cls="pos", size=14)
    f.wire([(654, 657), (580, 657)], colour="p")
    # encoder block
    f.rect(115, 337, 270, 304, "group", rx=10)
    f.text(103, 480, "\u00d7 $L$", size=16, anchor="end")
    f.text(103, 502, "encoder", size=13, cls="note", anchor="end")
    f.text(103, 519, "block (4.3)", size=13, cls="note", anchor="end")
    y = _sublayer(f, ex, 625, "multi-head self-attention", "attn", ex - 116)
    y = _sublayer(f, ex, y - 15, "feed-forward (4.1)", "ffn", ex - 116, w=150)
    f.wire([(ex, y), (ex, 318)])
    f.box(ex, 305, 80, 26, "LN (4.6)", cls="norm", size=14)
    f.wire([(ex, 292), (ex, 268), (410, 268), (410, 402), (466, 402)])
    f.text(ex + 10, 258, "memory $M$", anchor="start")
    f.shape(ex + 10, 283, "[B, S, D]", anchor="start")
    f.text(460, 393, "$K, V$", size=14, anchor="end", fill="k")
    # decoder block
    f.rect(435, 197, 270, 444, "group", rx=10)
    f.text(717, 420, "\u00d7 $L$", size=16, anchor="start")
    f.text(717, 442, "decoder", size=13, cls="note", anchor="start")
    f.text(717, 459, "block (4.5)", size=13, cls="note", anchor="start")
    side = dx + 116
    y = _sublayer(f, dx, 625, "causal self-attention", "attn", side)
    y = _sublayer(f, dx, y - 15, "cross-attention", "attn", side)
    f.text(dx - 8, 432, "$Q$", size=14, anchor="end", fill="q")
    y = _sublayer(f, dx, y - 15, "feed-forward (4.1)", "ffn", side, w=150)
    f.wire([(dx, y), (dx, 186)])
    f.box(dx, 173, 80, 26, "LN (4.6)", cls="norm", size=14)
    f.wire([(dx, 160), (dx, 144)])
    f.box(dx, 128, 150, 32, "linear, softmax", size=14)
    f.wire([(dx, 112), (dx, 78)])
    f.text(dx, 66, "$p(y_i \\mid y_{<i}, x)$")
    f.shape(dx + 10, 100, "[B, T, V]", anchor="start")
    f.text(ex, 160, "pre-norm: a layer norm (LN) before", size=13, cls="note")
    f.text(ex, 178, "each sub-layer; the lines around it", size=13, cls="note")
    f.text(ex, 196, "and the + are the residual connections", size=13, cls="note")
    return f


@figure
def post_pre_norm() -> Svg:
    f = Svg(
        "post_pre_norm",
        640,
        518,
        "Post-norm and pre-norm encoder blocks",
        "Left, post-norm (2017): each sub-layer's output is added to its input and the sum "
        "is layer-normalised, so the residual path from X to Z, shaded, passes through both "
        "layer norms. Right, pre-norm: the layer norm is applied to the input of each "
        "sub-layer, and the residual path from X to Z is a chain of additions only.",
    )
    for x, post, title, eq in (
        (175, True, "post-norm (2017)", "(4.2)"),
        (475, False, "pre-norm (since GPT-2)", "(4.3)"),
    ):
        side = x - 115
        # the residual path, shaded under the wires
        y1 = 410
        y2 = y1 - (145 if post else 130) - 15
        top = y2 - (145 if post else 130)
        add1, add2 = (y1 - 90, y2 - 90) if post else (y1 - 120, y2 - 120)
        band = [
            (x, 445),
            (x, y1),
            (side, y1),
            (side, add1),
            (x, add1),
            (x, y2),
            (side, y2),
            (side, add2),
            (x, add2),
            (x, top - 20),
        ]
        d = "M" + " L".join(f"{_fmt(a)},{_fmt(b)}" for a, b in band)
        f.raw(
            f'<path d="{d}" fill="none" stroke="#e2e2e2" stroke-width="14" '
            'stroke-linejoin="round"/>'
        )
        f.text(x, 30, title, weight="bold")
        f.text(x, 462, f"$X$  {eq}", size=15)
        f.wire([(x, 448), (x, y1)], head=False)
        y = _sublayer(f, x, y1, "multi-head self-attention", "attn", side, post=post)
        f.wire([(x, y), (x, y2)], head=False)
        f.text(x + 10, y2 - 4, "$Y$", anchor="start")
        y = _sublayer(f, x, y2, "feed-forward", "ffn", side, w=150, post=post)
        f.wire([(x, y), (x, top - 20)])
        f.text(x, top - 30, "$Z$")
    f.text(175, 490, "the residual path (shaded) passes", size=13, cls="note")
    f.text(175, 508, "through both layer norms", size=13, cls="note")
    f.text(475, 490, "$X$ reaches $Z$ by additions only;", size=13, cls="note")
    f.text(475, 508, "a final LN (4.6) ends a stack", size=13, cls="note")
    return f


@figure
def positions_in_attention() -> Svg:
    f = Svg(
        "positions_in_attention",
        840,
        420,
        "Where position information enters attention",
        "The attention computation for query i and key j, from the token vectors to the "
        "output y_i, with every place where a position method acts: an absolute encoding "
        "adds p_i to the input; RoPE rotates q_i and k_j by their positions; Shaw et al. add "
        "a learned vector a^K_ij to the key and a^V_ij to the value; T5 adds a learned "
        "bias per bucket of j - i to the score, and ALiBi adds -m_h (i - j).",
    )
    rows = {"q": 130, "k": 210, "v": 310}
    f.text(30, 216, "$x$", size=17)
    f.wire([(42, 210), (65, 210)])
    f.op(75, 210, "+", colour="p")
    f.box(78, 370, 128, 44, "absolute (Ch. 7)\n$x_i + p_i$", cls="pos", size=13)
    f.wire([(75, 348), (75, 222)], colour="p")
    f.wire([(85, 210), (110, 210)], head=False)
    f.dot(110, 210)
    for role, name in (("q", "Q"), ("k", "K"), ("v", "V")):
        y = rows[role]
        f.wire([(110, 210), (110, y), (135, y)])
        f.box(158, y, 46, 32, f"$W_{name}$", stroke=role)
    # RoPE rotates queries and keys
    f.wire([(181, 130), (228, 130)], colour="q")
    f.box(250, 130, 40, 28, "$R_i$", cls="pos", size=14)
    f.wire([(181, 210), (228, 210)], colour="k")
    f.box(250, 210, 40, 28, "$R_j$", cls="pos", size=14)
    f.text(250, 84, "RoPE (8.7)", size=13, fill="p")
    f.text(250, 101, "rotate by position", size=13, cls="note")
    # Shaw's key term
    f.wire([(270, 130), (400, 130), (400, 153)], colour="q")
    f.text(335, 122, "$q_i$", fill="q")
    f.wire([(270, 210), (318, 210)], colour="k")
    f.text(294, 202, "$k_j$", fill="k")
    f.op(330, 210, "+", colour="p")
    f.box(330, 262, 64, 28, "$a^K_{ij}$", cls="pos", size=14)
    f.text(372, 267, "Shaw (8.1)", size=13, anchor="start", fill="p")
    f.wire([(330, 248), (330, 222)], colour="p")
    f.wire([(342, 210), (400, 210), (400, 187)], colour="k")
    f.pill(400, 170, 110, "$q_i \\cdot k_j / \\sqrt{d}$", size=14)
    # biases on the score
    f.wire([(455, 170), (488, 170)])
    f.op(500, 170, "+", colour="p")
    f.box(
        500,
        70,
        236,
        44,
        "T5 (8.4): $b_h(\\rm{bucket}(j - i))$\nALiBi (8.5): $-m_h\\,(i - j)$",
        cls="pos",
        size=13,
    )
    f.wire([(500, 92), (500, 158)], colour="p")
    f.text(512, 140, "$e_{ij}$", size=14, anchor="start")
    f.wire([(510, 170), (540, 170)])
    f.pill(580, 170, 76, "softmax", size=14)
    f.wire([(618, 170), (700, 170), (700, 223)], colour="c")
    f.text(655, 162, "$\\alpha_{ij}$", fill="c")
    # Shaw's value term
    f.wire([(181, 310), (548, 310)], colour="v")
    f.text(300, 302, "$v_j$", fill="v")
    f.op(560, 310, "+", colour="p")
    f.box(560, 362, 64, 28, "$a^V_{ij}$", cls="pos", size=14)
    f.text(602, 367, "Shaw (8.2)", size=13, anchor="start", fill="p")
    f.wire([(560, 348), (560, 322)], colour="p")
    f.wire([(572, 310), (700, 310), (700, 257)], colour="v")
    f.pill(700, 240, 86, "$\\sum_j \\alpha_{ij}\\,(\\cdot)$", size=14)
    f.wire([(743, 240), (825, 240)], colour="c")
    f.text(790, 230, "$y_i$")
    f.text(
        420,
        410,
        "with the relative methods (RoPE, Shaw, T5, ALiBi), positions matter only through $j - i$",
        size=13,
        cls="note",
    )
    return f


# ------------------------------------------------ figures of chapters 5 to 14
TOY_CORPUS = {"low": 5, "lower": 2, "newest": 6, "widest": 3}


def toy_bpe(counts: dict[str, int], num_merges: int) -> list[tuple[tuple[str, str], int]]:
    """BPE as Chapter 5 writes it (recount every pair after every merge; ties to the
    smallest ids, characters numbered in code-point order): the merges and their
    counts. ``tests/test_figures.py`` checks the merges against ``course_lib``."""
    words = {tuple(w): n for w, n in counts.items()}
    ids = {ch: i for i, ch in enumerate(["[UNK]", *sorted({ch for w in counts for ch in w})])}
    merges = []
    for _ in range(num_merges):
        pairs: dict[tuple[str, str], int] = {}
        for w, n in words.items():
            for pair in zip(w, w[1:], strict=False):
                pairs[pair] = pairs.get(pair, 0) + n
        best = max(pairs, key=lambda p: (pairs[p], -ids[p[0]], -ids[p[1]]))
        merges.append((best, pairs[best]))
        ids.setdefault(best[0] + best[1], len(ids))
        new = {}
        for w, n in words.items():
            out, i = [], 0
            while i < len(w):
                if w[i : i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new[tuple(out)] = n
        words = new
    return merges


def toy_vocab() -> dict[str, int]:
    chars = sorted({ch for w in TOY_CORPUS for ch in w})
    vocab = {s: i for i, s in enumerate(["[UNK]", *chars])}
    for (a, b), _ in toy_bpe(TOY_CORPUS, 10):
        vocab[a + b] = len(vocab)
    return vocab


def _token_width(piece: str, size: float = 14) -> float:
    return max(24, 0.62 * size * len(piece) + 14)


def _tokens(f: Svg, x, y, pieces, cls="layer", w=None, gap=4, size=14) -> list:
    """A row of small boxes in a monospace font from ``x``, one per piece (a token
    or an id); returns their centres."""
    centres = []
    for p in pieces:
        width = w or _token_width(p, size)
        f.box(x + width / 2, y, width, 26, "", cls=cls, rx=4)
        f.items.append(
            f'<text x="{_fmt(x + width / 2)}" y="{_fmt(y + 5)}" text-anchor="middle" '
            f'style="font-family: {MONO}; font-size: {_fmt(size)}px">{_esc(p)}</text>'
        )
        centres.append(x + width / 2)
        x += width + gap
    return centres


@figure
def bpe_pipeline() -> Svg:
    merges = toy_bpe(TOY_CORPUS, 10)
    vocab = toy_vocab()
    f = Svg(
        "bpe_pipeline",
        860,
        440,
        "Byte-pair encoding: learning the merges, then encoding a text",
        "Top: BPE learns merges from word counts (low 5, lower 2, newest 6, widest 3); "
        "each merge joins the most frequent adjacent pair, e + s first (9 times), then "
        "es + t, l + o, lo + w; ten merges in all. Bottom: encoding the text 'lowest newer': "
        "pre-tokenization cuts it into words, replaying the merges in order cuts each word "
        "into pieces (low, est; new, e, r), each piece becomes its id in the vocabulary "
        "(14, 12; 16, 2, 7), and each id selects a row of the embedding table E, giving "
        "a sequence of five vectors.",
    )
    # --- training the merges
    f.text(20, 30, "learning the merges", anchor="start", weight="bold")
    f.text(20, 56, "word counts", size=13, cls="note", anchor="start")
    for n, (word, count) in enumerate(TOY_CORPUS.items()):
        y = 90 + n * 32
        _tokens(f, 20, y, list(word), w=20, gap=2, size=13)
        f.text(20 + 22 * len(word) + 6, y + 5, f"\u00d7{count}", size=13, anchor="start")
    f.wire([(200, 138), (236, 138)], colour="grey")
    f.text(262, 56, "merge the most frequent pair; repeat", size=13, cls="note", anchor="start")
    for n, ((a, b), count) in enumerate(merges):
        col, row = divmod(n, 5)
        x, y = 262 + col * 300, 84 + row * 30
        f.text(x + 18, y + 5, f"{n + 1}.", size=13, anchor="end", cls="note")
        cx = _tokens(f, x + 24, y, [a, b], gap=20, size=13)
        f.text((cx[0] + cx[1]) / 2 + (_token_width(a, 13) - _token_width(b, 13)) / 4, y + 5, "+")
        end = x + 24 + _token_width(a, 13) + _token_width(b, 13) + 20
        f.text(end + 12, y + 5, "\u2192", size=13)
        _tokens(f, end + 24, y, [a + b], cls="attn", size=13)
        f.text(x + 262, y + 5, f"{count}\u00d7", size=12, anchor="end", cls="note")
    # --- encoding a text
    y0 = 262
    f.raw(f'<path d="M20,{y0 - 32} H840" stroke="#dddddd" stroke-width="1"/>')
    f.text(20, y0 - 6, "encoding a text", anchor="start", weight="bold")
    ya, yb = y0 + 44, y0 + 104
    ym = (ya + yb) / 2
    _tokens(f, 20, ym, ["lowest newer"], cls="op")
    f.wire([(132, ym), (150, ym)])
    f.pill(200, ym, 96, "pre-tokenize", size=13)
    for y, word in ((ya, "lowest"), (yb, "newer")):
        f.wire([(248, ym), (258, ym), (258, y), (270, y)], head=y == ya)
        _tokens(f, 272, y, [word], size=14)
        f.wire([(344 if word == "newer" else 352, y), (372, y)])
    f.dot(258, ym)
    f.wire([(258, ym), (258, yb), (270, yb)])
    f.pill(432, ym, 112, "merges 1\u201310", size=13, h=64)
    f.text(432, ym + 22, "in order", size=13, cls="note")
    pieces = {ya: ["low", "est"], yb: ["new", "e", "r"]}
    for y, ps in pieces.items():
        f.wire([(488, y), (508, y)])
        end = 510 + sum(_token_width(p) + 4 for p in ps)
        _tokens(f, 510, y, ps, size=14, cls="attn")
        f.wire([(end, y), (626, y)])
        _tokens(f, 628, y, [str(vocab[p]) for p in ps], w=28, size=14)
    f.text(556, y0 + 14, "pieces", size=13, cls="note")
    f.text(675, y0 + 14, "ids", size=13, cls="note")
    # the embedding table: one row per token of the vocabulary
    n_rows, top, row_h = len(vocab), y0 + 10, 6
    ids = [vocab[p] for ps in pieces.values() for p in ps]
    f.wire([(724, ym), (758, ym)])
    f.rect(762, top, 46, n_rows * row_h, "layer")
    for i in sorted(ids):
        f.rect(762, top + i * row_h, 46, row_h, "attn")
    f.text(785, top - 8, "$E$", size=14)
    f.shape(785, top + n_rows * row_h + 18, f"[{n_rows}, d]")
    f.text(814, top + 2 * row_h + 6, "id 2", size=11, cls="note", anchor="start")
    f.text(814, top + 16 * row_h + 6, "id 16", size=11, cls="note", anchor="start")
    f.text(
        430,
        428,
        "each id selects a row of $E$: five pieces, five vectors of width $d$ (5.1)-(5.2)",
        size=13,
        cls="note",
    )
    return f


@figure
def qk_ov_circuits() -> Svg:
    f = Svg(
        "qk_ov_circuits",
        860,
        400,
        "One attention head as a QK circuit and an OV circuit",
        "Top, the QK circuit: the query token x_i goes through W_Q and the key token x_j "
        "through W_K; their dot product, scaled by the square root of d_k, is the score "
        "x_i^T A_h x_j with A_h = W_Q W_K^T, a d_model by d_model matrix of rank at most d_k; "
        "a softmax over j gives the weights alpha_ij: where the head looks. Bottom, the OV "
        "circuit: x_j goes through W_V and W_O, that is through B_h = W_V W_O, also of rank "
        "at most d_k; the head adds up alpha_ij x_j B_h over j: what it writes. The "
        "multi-head output for token i is the sum of the heads' outputs.",
    )
    yq, yk, yv = 80, 170, 300
    # inputs
    f.text(40, yq + 6, "$x_i$", size=16)
    f.text(40, yk + 30, "$x_j$", size=16)
    f.wire([(58, yq), (118, yq)], colour="q")
    f.wire([(58, yk + 24), (80, yk + 24)], head=False)
    f.dot(80, yk + 24)
    f.wire([(80, yk + 24), (80, yk), (118, yk)], colour="k")
    f.wire([(80, yk + 24), (80, yv), (118, yv)], colour="v")
    f.text(
        20,
        22,
        "token vectors: rows of width $d_{\\rm{model}}$",
        size=13,
        cls="note",
        anchor="start",
    )
    # QK circuit
    f.box(150, yq, 60, 34, "$W_Q^{(h)}$", stroke="q", size=14)
    f.box(150, yk, 60, 34, "$W_K^{(h)}$", stroke="k", size=14)
    f.wire([(180, yq), (330, yq), (330, yq + 27)], colour="q")
    f.text(250, yq - 8, "$q_i$  [$d_k$]", fill="q", size=14)
    f.wire([(180, yk), (330, yk), (330, yk - 27)], colour="k")
    f.text(250, yk + 22, "$k_j$  [$d_k$]", fill="k", size=14)
    f.pill(330, (yq + yk) / 2, 118, "$q_i \\cdot k_j / \\sqrt{d_k}$", size=14)
    f.wire([(389, (yq + yk) / 2), (432, (yq + yk) / 2)])
    f.pill(480, (yq + yk) / 2, 90, "softmax$_j$", size=14)
    f.wire([(525, (yq + yk) / 2), (640, (yq + yk) / 2), (640, yv - 13)], colour="c")
    f.text(588, (yq + yk) / 2 - 10, "$\\alpha^{(h)}_{ij}$", fill="c")
    f.rect(112, yq - 44, 290, 166, "group", rx=10)
    f.text(590, 34, "QK circuit: where head $h$ looks (6.7)", weight="bold", size=14)
    f.text(590, 58, "$A_h = W_Q^{(h)} W_K^{(h)\\top}$, score $x_i^\\top A_h x_j$", size=14)
    # OV circuit
    f.box(150, yv, 60, 34, "$W_V^{(h)}$", stroke="v", size=14)
    f.wire([(180, yv), (270, yv)], colour="v")
    f.box(300, yv, 60, 34, "$W_O^{(h)}$", size=14)
    f.wire([(330, yv), (548, yv)], colour="v")
    f.text(440, yv - 8, "$x_j B_h$  [$d_{\\rm{model}}$]", fill="v", size=14)
    f.rect(112, yv - 30, 226, 60, "group", rx=10)
    f.pill(640, yv, 180, "$\\sum_j \\alpha^{(h)}_{ij}\\,(\\cdot)$", size=14)
    f.wire([(730, yv), (790, yv)], colour="c")
    f.text(790, yv - 12, "head $h$", size=13, cls="note", anchor="end")
    f.op(802, yv, "+")
    f.wire([(802, yv - 30), (802, yv - 12)], colour="c")
    f.text(802, yv - 38, "other heads", size=13, cls="note")
    f.wire([(802, yv + 12), (802, yv + 44)], colour="c")
    f.text(802, yv + 62, "$\\rm{MHA}(X)_i$ (6.8)", size=14, anchor="end")
    f.text(225, yv + 54, "OV circuit: what head $h$ writes (6.8)", weight="bold", size=14)
    f.text(225, yv + 78, "$B_h = W_V^{(h)} W_O^{(h)}$", size=14)
    f.text(
        590,
        84,
        "$A_h$ and $B_h$: $d_{\\rm{model}} \\times d_{\\rm{model}}$, rank $\\le d_k$",
        size=13,
        cls="note",
    )
    return f


@figure
def sinusoid_waves() -> Svg:
    d, length, p_mark = 16, 64, 20
    f = Svg(
        "sinusoid_waves",
        860,
        470,
        "The sinusoidal position table as waves of falling frequency",
        "The sinusoidal table for width d = 16 drawn as eight rows, one per pair i of "
        "coordinates, over positions 0 to 63. Each row shows sin(p omega_i) as a solid "
        "line and cos(p omega_i) as a dashed line, with omega_i = 10000^(-2i/d). Row 0 "
        "has a wavelength of 2 pi, about 6 positions; each next row's wavelength is about "
        "3.2 times longer, so the last rows are almost flat over 64 positions. A vertical "
        "line at position 20 marks one row of the table, PE(20): the values where it "
        "crosses the waves.",
    )
    x0, x1, top, band = 150, 700, 62, 42
    f.text(x0 - 10, 30, "pair $i$", size=13, cls="note", anchor="end")
    f.text((x0 + x1) / 2, 30, "position $p$ \u2192", size=13, cls="note")
    f.text(x1 + 14, 30, "wavelength $2\\pi/\\omega_i$", size=13, cls="note", anchor="start")
    xs = [x0 + (x1 - x0) * k / 400 for k in range(401)]
    px = x0 + (x1 - x0) * p_mark / (length - 1)
    for i in range(d // 2):
        omega = 10000 ** (-2 * i / d)
        yc = top + i * band + band / 2
        f.raw(f'<path d="M{x0},{_fmt(yc)} H{x1}" stroke="#e2e2e2" stroke-width="1"/>')
        for fn, dash in ((math.sin, False), (math.cos, True)):
            pts = [(x, yc - 15 * fn((x - x0) / (x1 - x0) * (length - 1) * omega)) for x in xs]
            f.wire(pts, colour="p" if not dash else "grey", head=False, dash=dash)
        f.text(x0 - 10, yc + 5, str(i), size=13, anchor="end")
        f.text(
            x1 + 14, yc + 5, f"{2 * math.pi / omega:,.{0 if i else 1}f}", size=13, anchor="start"
        )
        f.dot(px, yc - 15 * math.sin(p_mark * omega), "p")
        f.dot(px, yc - 15 * math.cos(p_mark * omega), "grey")
    f.raw(
        f'<path d="M{_fmt(px)},{top - 4} V{top + 8 * band + 4}" stroke="{INK}" '
        'stroke-width="1" stroke-dasharray="3 3"/>'
    )
    f.text(px, top + 8 * band + 22, "$PE(20)$: one row of the table", size=13)
    for x, label in ((x0, "0"), (x1, "63")):
        f.text(x, top + 8 * band + 22, label, size=12, cls="note")
    f.raw(f'<path d="M{x0 + 380},{top + 8 * band + 42} h24" class="wire" stroke="{POSITION}"/>')
    f.text(
        x0 + 410,
        top + 8 * band + 47,
        "$\\sin p\\,\\omega_i$ (coordinate $2i$)",
        size=13,
        anchor="start",
    )
    f.raw(f'<path d="M{x0 + 80},{top + 8 * band + 42} h24" class="wire dash" stroke="{GREY}"/>')
    f.text(
        x0 + 110,
        top + 8 * band + 47,
        "$\\cos p\\,\\omega_i$ (coordinate $2i + 1$)",
        size=13,
        anchor="start",
    )
    f.text(20, top + 8 * band + 47, "$d = 16$ (7.1)", size=13, anchor="start")
    return f


@figure
def data_parallel() -> Svg:
    f = Svg(
        "data_parallel",
        860,
        380,
        "Data-parallel training with an all-reduce",
        "Two processes each hold a full copy of the model with the "
        "same weights theta. The batch of 2b examples is cut into two shards of b; each "
        "process computes the gradient g_r of its shard's mean loss. An all-reduce averages "
        "the gradients, (g_1 + g_2) / 2, which equals the gradient of the whole batch's "
        "mean loss (9.8), and hands the average to every process; each then takes the "
        "same optimizer step, so the copies keep identical weights.",
    )
    rows = {"process 1": 110, "process 2": 250}
    f.text(62, 34, "batch of $Wb$", size=14)
    f.text(62, 52, "examples", size=13, cls="note")
    f.rect(40, 68, 44, 224, "frame", rx=4)
    for n, y in enumerate(rows.values()):
        f.rect(46, y - 40, 32, 80, "layer", rx=3)
        f.text(62, y + 5, f"$r={n + 1}$", size=12)
    f.text(62, 312, "$W = 2$ shards of $b$", size=13, cls="note")
    for n, (name, y) in enumerate(rows.items()):
        f.wire([(80, y), (118, y)])
        f.box(192, y, 140, 52, "", cls="frame", rx=8)
        f.text(192, y - 4, name, size=13)
        f.text(192, y + 16, "model copy, weights $\\theta$", size=12)
        f.wire([(262, y), (300, y)])
        f.pill(362, y, 120, "loss, backward", size=13)
        f.wire([(422, y), (486, y)], colour="c")
        f.text(452, y - 10, f"$g_{n + 1}$", fill="c")
        f.wire([(660, y), (700, y)], colour="c")
        f.text(680, y - 10, "$\\gbar$", fill="c")
        f.box(760, y, 116, 36, "optimizer step", size=13)
        out = -1 if n == 0 else 1
        f.wire(
            [(760, y + 18 * out), (760, y + 44 * out), (192, y + 44 * out), (192, y + 28 * out)],
            colour="grey",
        )
        f.text(
            400,
            y + 44 * out + (-6 if n == 0 else 16),
            "the new $\\theta$, the same in every process",
            size=12,
            cls="note",
        )
    f.box(574, 180, 172, 196, "", cls="attn")
    f.text(574, 120, "all-reduce", weight="bold", size=14)
    f.text(574, 150, "$\\gbar = (1/W) \\sum_r g_r$", size=14)
    f.text(574, 186, "= the gradient of the", size=13, cls="note")
    f.text(574, 204, "whole batch's mean loss", size=13, cls="note")
    f.text(574, 222, "(9.8)", size=13, cls="note")
    f.text(574, 248, "DDP runs it inside", size=13, cls="note")
    f.text(574, 266, "backward (gloo, nccl)", size=13, cls="note")
    f.text(
        430,
        368,
        "each process holds the whole model, its gradients and the optimizer state",
        size=13,
        cls="note",
    )
    return f


def _series(f: Svg, x0, x1, y, seed_phase=0.0, amp=14, colour=INK, steps=120) -> None:
    """A made-up seasonal series with a trend, for illustration only."""
    pts = []
    for k in range(steps + 1):
        t = k / steps
        v = math.sin(2 * math.pi * 3 * t + seed_phase) + 0.35 * math.sin(2 * math.pi * 11 * t)
        pts.append((x0 + (x1 - x0) * t, y - amp * (0.6 * v + 1.2 * t - 0.6)))
    d = "M" + " L".join(f"{_fmt(a)},{_fmt(b)}" for a, b in pts)
    f.raw(f'<path d="{d}" fill="none" stroke="{colour}" stroke-width="1.4"/>')


@figure
def patch_forecaster() -> Svg:
    f = Svg(
        "patch_forecaster",
        880,
        420,
        "A patch Transformer forecaster with cross-attention to covariates",
        "Top: the history x of L = 156 weeks, normalised by its own mean and standard "
        "deviation (RevIN), is cut into N = 18 overlapping patches of P = 16 steps with "
        "stride S = 8; each patch is embedded by a linear map W_p plus a learned position "
        "w^pos_n, and the N tokens pass through 2 pre-norm blocks; the outputs are flattened "
        "and mapped linearly to the H = 52 future values, and the normalisation is undone "
        "(10.4). Bottom: the covariates u over the history and the horizon, 208 steps, are "
        "patched and embedded into 25 memory tokens M; in the variant with covariates each "
        "block has a cross-attention sub-layer (10.7) whose queries are the series' patch "
        "tokens and whose keys and values come from M.",
    )
    # the history and its patches
    y = 92
    f.text(30, 30, "history $x$, $L = 156$ weeks (RevIN-normalised)", size=13, anchor="start")
    _series(f, 30, 230, y)
    n_p, px = 18, 200 / 156
    for n in range(n_p):
        a = 30 + n * 8 * px
        yy = 122 + (n % 2) * 9
        f.raw(
            f'<path d="M{_fmt(a + 1)},{yy - 4} V{yy} H{_fmt(a + 16 * px - 1)} V{yy - 4}" '
            f'fill="none" stroke="{KEY}" stroke-width="1.3"/>'
        )
    f.text(
        30,
        156,
        "patches: $P = 16$, stride $S = 8$, $N = 18$ (10.3)",
        size=13,
        anchor="start",
        cls="note",
    )
    f.wire([(236, y), (266, y)])
    f.box(300, y, 60, 34, "$W_p$", size=14)
    f.wire([(330, y), (355, y)])
    f.op(365, y, "+", colour="p")
    f.box(365, 38, 60, 28, "$w^{pos}_n$", cls="pos", size=14)
    f.wire([(365, 52), (365, 80)], colour="p")
    f.wire([(375, y), (412, y)])
    f.shape(394, y + 24, "[N, D]")
    # the blocks
    f.rect(414, 44, 296, 120, "group", rx=10)
    f.text(562, 32, "$\\times 2$ pre-norm blocks (LN, residuals not drawn)", size=13, cls="note")
    boxes = (
        (466, "self-\nattention", "attn"),
        (562, "cross-\nattention", "attn"),
        (658, "feed-\nforward", "ffn"),
    )
    for x, label, cls in boxes:
        f.box(x, y, 84, 60, label, cls=cls, size=14)
    f.raw(
        '<rect x="520" y="62" width="84" height="60" rx="6" fill="none" '
        'stroke="#ffffff" stroke-width="2.5" stroke-dasharray="5 4"/>'
    )
    f.wire([(508, y), (518, y)])
    f.wire([(604, y), (614, y)])
    f.wire([(710, y), (734, y)])
    f.box(784, y, 96, 48, "flatten,\nlinear $W_h$", size=13)
    f.wire([(784, y + 24), (784, y + 60)], colour="ink")
    f.text(784, y + 80, "$\\yhat$, $H = 52$ weeks", size=14)
    f.text(784, y + 100, "(RevIN undone)", size=13, cls="note")
    # the covariates
    yc = 300
    f.text(
        30, 238, "covariates $u$ over history and horizon, $L + H = 208$", size=13, anchor="start"
    )
    _series(f, 30, 297, yc, seed_phase=1.3, colour=GREY)
    ox = 30 + 267 * 156 / 208
    f.raw(
        f'<path d="M{_fmt(ox)},{yc - 34} V{yc + 30}" stroke="{INK}" stroke-width="1" '
        'stroke-dasharray="3 3"/>'
    )
    f.text(ox, yc + 46, "origin $t$", size=12, cls="note")
    f.text(ox + 36, yc - 38, "horizon", size=12, cls="note")
    f.wire([(304, yc), (334, yc)])
    f.box(388, yc, 104, 40, "patch, embed,\n+ position", size=12)
    f.wire([(440, yc), (466, yc)], colour="k")
    f.text(472, yc + 5, "$M$", size=16, anchor="start")
    f.shape(472, yc + 26, "[25, D]", anchor="start")
    f.wire([(506, yc), (562, yc), (562, y + 32)], colour="k")
    f.text(570, yc - 40, "$K, V$ (10.7)", size=14, fill="k", anchor="start")
    f.text(
        440,
        404,
        "in the chapter's comparison, the cross-attention sub-layer (dashed) is the variant "
        "with covariates",
        size=13,
        cls="note",
    )
    return f


@figure
def gpt_lora() -> Svg:
    f = Svg(
        "gpt_lora",
        860,
        470,
        "LoRA adapters beside W_q and W_v in a GPT block",
        "Left: a pre-norm GPT block, bottom to top: layer norm, the projections W_q, W_k and "
        "W_v, causal self-attention, the output projection W_O and a residual sum, then a "
        "layer norm, the feed-forward layers W_1 and W_2 and a second residual sum. Every "
        "pretrained weight is frozen (grey). Beside W_q and W_v, as in the main experiments "
        "of the LoRA paper, a trainable low-rank branch BA adds its output to the frozen "
        "layer's. Right: one LoRA layer, y = W x + b + (alpha / r) B A x, with A of shape "
        "r by d_in, B of shape d_out by r and B zero at the start, so that training starts "
        "from the pretrained model; after training BA can be merged into W.",
    )
    x = 210
    f.text(x, 458, "$x$  from the block below", size=14)
    f.wire([(x, 444), (x, 420)], head=False)
    f.dot(x, 420)
    f.wire([(x, 420), (58, 420), (58, 188), (x - 10, 188)])
    f.wire([(x, 420), (x, 406)])
    f.box(x, 393, 56, 26, "LN", cls="norm", size=14)
    f.wire([(x, 380), (x, 364)], head=False)
    f.raw(f'<path d="M90,364 H330" stroke="{INK}" stroke-width="1.6"/>')
    f.dot(x, 364)
    cols = (("q", "$W_q$", 102, True), ("k", "$W_k$", 210, False), ("v", "$W_v$", 290, True))
    for role, label, cx, lora in cols:
        f.wire([(cx, 364), (cx, 349)])
        f.box(cx, 334, 50, 30, label, cls="frozen", stroke=role, size=14)
        top = 319
        if lora:
            f.wire([(cx + 44, 364), (cx + 44, 349)])
            f.box(cx + 44, 334, 34, 30, "$BA$", cls="lora", size=13)
            f.wire([(cx + 44, 319), (cx + 44, 300), (cx + 10, 300)], colour="grey")
            f.wire([(cx, 319), (cx, 310)], head=False, colour=role)
            f.op(cx, 300, "+", colour=role)
            top = 290
        f.wire([(cx, top), (cx, 258)], colour=role)
        f.text(
            cx - 8,
            276,
            {"q": "$Q$", "k": "$K$", "v": "$V$"}[role],
            size=14,
            anchor="end",
            fill=role,
        )
    f.pill(x, 244, 270, "causal self-attention (Ch. 3, 11)", size=13, h=28)
    f.wire([(x, 230), (x, 216)], colour="c")
    f.box(x, 203, 50, 26, "$W_O$", cls="frozen", size=14)
    f.wire([(x, 190), (x, 188)], head=False, colour="c")
    f.op(x, 178, "+")
    f.wire([(x, 168), (x, 160)], head=False)
    f.dot(x, 160)
    f.wire([(x, 160), (58, 160), (58, 52), (x - 10, 52)])
    f.wire([(x, 160), (x, 146)])
    f.box(x, 133, 56, 26, "LN", cls="norm", size=14)
    f.wire([(x, 120), (x, 108)])
    f.box(x, 92, 150, 32, "$W_1$, GELU, $W_2$", cls="frozen", size=14)
    f.wire([(x, 76), (x, 64)])
    f.op(x, 52, "+")
    f.wire([(x, 42), (x, 18)])
    f.text(x + 10, 24, "to the next block", size=13, cls="note", anchor="start")
    f.text(335, 203, "grey: frozen", size=13, cls="note", anchor="start")
    f.text(335, 92, "pre-norm GPT block", size=13, cls="note", anchor="start")
    f.text(335, 110, "(Ch. 4, 11)", size=13, cls="note", anchor="start")
    # one LoRA layer
    f.rect(470, 120, 376, 300, "frame", rx=12)
    f.text(658, 146, "one LoRA layer (11.4)", weight="bold", size=14)
    y0, ya = 200, 304
    f.text(490, 268, "$x$", size=16)
    f.wire([(502, 262), (530, 262)], head=False)
    f.dot(530, 262)
    f.wire([(530, 262), (530, y0), (588, y0)])
    f.box(630, y0, 80, 34, "$W$, $b$", cls="frozen", size=14)
    f.text(630, y0 + 34, "frozen, $d_{out} \\times d_{in}$", size=12, cls="note")
    f.wire([(530, 262), (530, ya), (566, ya)])
    f.box(596, ya, 56, 32, "$A$", cls="lora", size=14)
    f.text(596, ya + 32, "$r \\times d_{in}$", size=12, cls="note")
    f.wire([(624, ya), (656, ya)])
    f.box(686, ya, 56, 32, "$B$", cls="lora", size=14)
    f.text(686, ya + 32, "$d_{out} \\times r$", size=12, cls="note")
    f.text(686, ya + 50, "$B_0 = 0$", size=12, cls="note")
    f.wire([(714, ya), (740, ya)])
    f.pill(772, ya, 58, "$\\alpha / r$", size=14)
    f.wire([(772, ya - 15), (772, y0 + 12)])
    f.wire([(670, y0), (760, y0)])
    f.op(772, y0, "+")
    f.wire([(784, y0), (830, y0)])
    f.text(826, y0 - 10, "$y$", size=16, anchor="end")
    f.text(658, 388, "trainable: $r\\,(d_{in} + d_{out})$ numbers per layer;", size=12, cls="note")
    f.text(658, 406, "after training, $BA$ can be merged into $W$", size=12, cls="note")
    return f


@figure
def bert_inputs_mlm() -> Svg:
    f = Svg(
        "bert_inputs_mlm",
        860,
        470,
        "BERT's input embeddings and the masked-language-model recipe",
        "Top: the input [CLS] my lord [SEP] good night [SEP], two segments. Each token's "
        "input vector is the sum of its token embedding E[w_t], its segment embedding S[s_t] "
        "(segment 0 up to and including the first [SEP], 1 after it) and its position "
        "embedding P[t], followed by a layer norm (12.3). Bottom: the masking recipe (12.1): "
        "15% of the tokens that are not special are selected as targets; a selected token "
        "is replaced by [MASK] with probability 0.8, by a random token with probability "
        "0.1, and left unchanged with probability 0.1; the loss is computed at the selected "
        "positions only.",
    )
    tokens = ["[CLS]", "my", "lord", "[SEP]", "good", "night", "[SEP]"]
    segments = [0, 0, 0, 0, 1, 1, 1]
    x0, step, w = 210, 90, 80
    rows = (
        ("input", 44),
        ("token $E[w_t]$", 94),
        ("segment $S[s_t]$", 144),
        ("position $P[t]$", 194),
    )
    for label, y in rows:
        f.text(20, y + 5, label, size=14, anchor="start")
    for t, (tok, s) in enumerate(zip(tokens, segments, strict=True)):
        cx = x0 + t * step
        _tokens(f, cx - w / 2, 44, [tok], w=w, size=13, cls="op")
        f.box(cx, 94, w, 30, "", size=13)
        f.items.append(
            f'<text x="{_fmt(cx)}" y="99" text-anchor="middle" class="m" '
            f'style="font-size: 15.4px"><tspan font-style="italic">E</tspan>'
            f'<tspan font-size="11" dy="4.6" style="font-family: {MONO}">{_esc(tok)}</tspan></text>'
        )
        f.box(cx, 144, w, 30, f"$S_{s}$", size=14)
        f.box(cx, 194, w, 30, f"$P_{t}$", cls="pos", size=14)
        for y in (119, 169):
            f.text(cx, y + 5, "+", size=14)
    f.text(x0 + 3 * step, 232, "segment 0 up to the first [SEP], then 1", size=12, cls="note")
    f.text(
        430,
        262,
        "$x_t = \\rm{LN}(E[w_t] + P[t] + S[s_t])$ (12.3), then encoder blocks without a mask",
        size=14,
    )
    # the masking recipe
    f.raw('<path d="M20,284 H840" stroke="#dddddd" stroke-width="1"/>')
    f.text(20, 310, "masked-language-model targets (12.1)", weight="bold", anchor="start", size=14)
    words = ["the", "lady", "doth", "protest", "too", "much"]
    centres = _tokens(f, 20, 370, words, size=13)
    sel = centres[3]
    f.box(sel, 370, _token_width("protest", 13) + 6, 32, "", cls="group", rx=6)
    f.text(sel, 404, "selected: 15% of the", size=12, cls="note")
    f.text(sel, 420, "non-special tokens", size=12, cls="note")
    f.wire([(334, 370), (420, 370)], head=False, colour="c")
    f.dot(420, 370, "c")
    f.text(376, 346, "a selected", size=12, cls="note")
    f.text(376, 361, "token becomes", size=12, cls="note")
    outcomes = (
        (326, "[MASK]", "80%"),
        (370, "sword", "10%, a random token"),
        (414, "protest", "10%, unchanged"),
    )
    for y, tok, share in outcomes:
        f.wire([(420, 370), (450, y), (500, y)], colour="c")
        _tokens(f, 502, y, [tok], size=13, cls="attn")
        f.text(502 + _token_width(tok, 13) + 10, y + 5, share, size=13, anchor="start")
    f.text(
        430,
        456,
        "the model reads the altered text and must predict the original token at each "
        "selected position; the loss ignores every other position",
        size=12,
        cls="note",
    )
    return f


DIGIT = [
    "00111100",
    "01100110",
    "11000011",
    "10000001",
    "10000001",
    "11000011",
    "01100110",
    "00111100",
]


def _pixels(f: Svg, x0, y0, rows, cell) -> None:
    for i, row in enumerate(rows):
        for j, v in enumerate(row):
            fill = "#444444" if v == "1" else "#ffffff"
            f.raw(
                f'<rect x="{_fmt(x0 + j * cell)}" y="{_fmt(y0 + i * cell)}" width="{cell}" '
                f'height="{cell}" fill="{fill}" stroke="#bbbbbb" stroke-width="0.5"/>'
            )


@figure
def vit_embedding() -> Svg:
    f = Svg(
        "vit_embedding",
        860,
        424,
        "The Vision Transformer's input: patches, the class token and the position table",
        "An 8 by 8 grey image is cut into 16 patches of 2 by 2 pixels, numbered row by row. "
        "Each patch, flattened to C P^2 = 4 numbers, is multiplied by the same learned "
        "matrix E. A learned class token x_cls is put in front, and a learned position "
        "embedding, one row of E_pos per position 0 to 16, is added to every token (13.1). "
        "The 17 vectors go through L pre-norm encoder blocks; a layer norm and a linear "
        "head on the class token's final state give the class scores (13.4).",
    )
    cell = 14
    f.raw('<g transform="translate(0,-56)">')
    _pixels(f, 30, 344, DIGIT, cell)
    for k in (2, 4, 6):
        f.raw(
            f'<path d="M{30 + k * cell},344 v112 M30,{344 + k * cell} h112" stroke="{QUERY}" '
            'stroke-width="1.5"/>'
        )
    f.text(86, 330, "image, 8 \u00d7 8, $P = 2$", size=13)
    f.text(86, 474, "16 patches, row by row", size=12, cls="note")
    cols = [(340, 1), (420, 2), (500, 3), (640, 16)]
    f.wire([(150, 400), (300, 400)], colour="grey")
    f.text(225, 390, "flatten", size=12, cls="note")
    f.text(225, 420, "$C P^2 = 4$ numbers", size=12, cls="note")
    ycls, yplus, yenc = 350, 290, 226
    for x, n in cols:
        r, c = divmod(n - 1, 4)
        rows = [DIGIT[2 * r + i][2 * c : 2 * c + 2] for i in range(2)]
        _pixels(f, x - 14, 386, rows, cell)
        f.text(x + 28, 404, f"$x_p^{{{n}}}$", size=13, anchor="start")
        f.wire([(x, 384), (x, ycls + 14)])
        f.box(x, ycls, 40, 26, "$E$", size=14)
    f.text(570, 404, "\u22ef", size=18)
    f.text(570, ycls + 5, "\u22ef", size=18)
    f.text(730, ycls + 5, "one $E$ for all patches", size=12, cls="note", anchor="start")
    f.text(730, ycls + 21, "$[C P^2, D]$", size=12, cls="note", anchor="start")
    f.box(250, ycls, 54, 30, "$x_{\\rm{cls}}$", cls="lora", size=14)
    f.text(218, ycls + 5, "learned", size=12, cls="note", anchor="end")
    for x, n in [(250, 0), *cols]:
        f.wire([(x, ycls - 13), (x, yplus + 10)])
        f.op(x, yplus, "+", colour="p")
        f.box(x - 36, yplus, 30, 24, str(n), cls="pos", size=13)
        f.wire([(x - 21, yplus), (x - 12, yplus)], colour="p", head=False)
        f.wire([(x, yplus - 10), (x, yenc + 24)])
    f.text(570, yplus + 5, "\u22ef", size=18)
    f.text(730, yplus - 2, "$E_{\\rm{pos}}$: a learned row", size=12, cls="note", anchor="start")
    f.text(730, yplus + 14, "per position, 0 to 16", size=12, cls="note", anchor="start")
    f.box(445, yenc, 470, 48, "$L$ pre-norm encoder blocks (13.2)-(13.3)", cls="attn", size=14)
    f.text(690, yenc + 36, "$z_0$: 17 tokens (13.1)", size=12, cls="note", anchor="start")
    f.wire([(250, yenc - 24), (250, 176)], colour="c")
    f.text(258, 192, "$z_L^0$", size=14, anchor="start")
    f.box(250, 160, 120, 30, "LN, $W_{\\rm{head}}$", size=14)
    f.wire([(250, 145), (250, 110)])
    f.text(250, 96, "class scores $y$ (13.4)", size=14)
    for x, _ in cols:
        f.wire([(x, yenc - 24), (x, 180)], colour="grey", head=False, dash=True)
    f.text(500, 168, "the patches' final states: not used by the head", size=12, cls="note")
    f.raw("</g>")
    return f


GAT_WEIGHTS = {"1": 0.35, "2": 0.25, "3": 0.15, "4": 0.10, "i": 0.15}
GAT_LABELS = {"1": (112, 172), "2": (290, 172), "3": (284, 250), "4": (116, 250)}


@figure
def gat_neighbourhood() -> Svg:
    f = Svg(
        "gat_neighbourhood",
        860,
        400,
        "Graph attention over one node's neighbourhood",
        "Left: node i, its four neighbours j = 1 to 4 and its self-loop. Each edge into i "
        "carries an attention weight alpha_ij, drawn as the line's width; the example "
        "weights 0.35, 0.25, 0.15, 0.10 and 0.15 for the self-loop sum to 1. Right: the "
        "computation: a score e_ij = LeakyReLU(a_dst^T W x_i + a_src^T W x_j) for every "
        "edge (14.2), a softmax over the neighbourhood including i itself (14.3), and "
        "the new vector h_i = sigma(sum_j alpha_ij W x_j) (14.4). With K heads, a hidden "
        "layer concatenates the heads' outputs and the output layer averages them.",
    )
    ci = (200, 215)
    nbrs = {"1": (70, 95), "2": (340, 90), "3": (345, 330), "4": (60, 325)}
    for j, (x, y) in nbrs.items():
        a = GAT_WEIGHTS[j]
        dx, dy = ci[0] - x, ci[1] - y
        norm = math.hypot(dx, dy)
        start = (x + 24 * dx / norm, y + 24 * dy / norm)
        end = (ci[0] - 28 * dx / norm, ci[1] - 28 * dy / norm)
        f.wire([start, end], colour="c", head=False, width=1 + 14 * a)
        lx, ly = GAT_LABELS[j]
        f.text(
            lx,
            ly,
            f"$\\alpha_{{i{j}}} = {a:.2f}$",
            size=13,
            fill="c",
            anchor="start" if lx > ci[0] else "end",
        )
    # the self-loop
    loop = (
        f"M{ci[0] - 12},{ci[1] - 25} C{ci[0] - 40},{ci[1] - 95} {ci[0] + 40},{ci[1] - 95} "
        f"{ci[0] + 12},{ci[1] - 25}"
    )
    f.raw(
        f'<path d="{loop}" class="wire" stroke="{CONTEXT}" '
        f'style="stroke-width: {_fmt(1 + 14 * GAT_WEIGHTS["i"])}"/>'
    )
    f.text(ci[0], ci[1] - 92, f"$\\alpha_{{ii}} = {GAT_WEIGHTS['i']:.2f}$", size=13, fill="c")
    for j, (x, y) in nbrs.items():
        f.raw(
            f'<circle cx="{x}" cy="{y}" r="22" fill="#ffffff" stroke="{INK}" stroke-width="1.5"/>'
        )
        f.text(x, y + 6, f"$j={j}$", size=13)
    f.raw(
        f'<circle cx="{ci[0]}" cy="{ci[1]}" r="26" fill="#fcebd0" stroke="#b57d00" '
        'stroke-width="1.8"/>'
    )
    f.text(ci[0], ci[1] + 6, "$i$", size=16)
    f.text(200, 388, "weights into $i$ sum to 1, self-loop included", size=12, cls="note")
    # the computation
    x0 = 430
    f.rect(x0, 24, 414, 352, "frame", rx=12)
    steps = (
        (
            "score every edge into $i$ (14.2)",
            "$e_{ij} = \\rm{LeakyReLU}(a_{\\rm{dst}}^\\top W x_i + a_{\\rm{src}}^\\top W x_j)$",
        ),
        (
            "softmax over $\\tilde N(i) = N(i) \\cup \\{i\\}$ (14.3)",
            "$\\alpha_{ij} = \\exp e_{ij} \\,/\\, \\sum_{k \\in \\tilde N(i)} \\exp e_{ik}$",
        ),
        (
            "weighted sum of the neighbours (14.4)",
            "$h_i = \\sigma(\\sum_{j \\in \\tilde N(i)} \\alpha_{ij}\\, W x_j)$",
        ),
    )
    for n, (title, formula) in enumerate(steps):
        y = 62 + n * 88
        f.text(x0 + 20, y, f"{n + 1}. {title}", size=13, anchor="start", weight="bold")
        f.text(x0 + 36, y + 30, formula, size=14, anchor="start")
        if n < 2:
            f.wire([(x0 + 200, y + 44), (x0 + 200, y + 64)], colour="grey")
    f.text(
        x0 + 20,
        316,
        "$K$ heads: $K$ copies of $(W, a)$ side by side;",
        size=13,
        anchor="start",
        cls="note",
    )
    f.text(
        x0 + 20,
        336,
        "a hidden layer concatenates their outputs,",
        size=13,
        anchor="start",
        cls="note",
    )
    f.text(x0 + 20, 356, "the output layer averages them", size=13, anchor="start", cls="note")
    return f


def main(argv: list[str]) -> int:
    names = set(argv)
    for fn in FIGURES:
        if names and fn.__name__ not in names:
            continue
        svg = fn()
        assert svg.name == fn.__name__, f"{fn.__name__} names its SVG {svg.name}"
        (HERE / f"{svg.name}.svg").write_text(svg.render())
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
