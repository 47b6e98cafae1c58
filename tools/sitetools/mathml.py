"""TeX math as MathML, written when the site is built, so that no script typesets it.

pymdownx.arithmatex marks math as ``<span class="arithmatex">\\(...\\)</span>`` (inline) and
``<div class="arithmatex">\\[...\\]</div>`` (display); :func:`with_mathml` puts MathML,
which every current browser draws and screen readers read, in place of the TeX.
"""

from __future__ import annotations

import html
import re

from latex2mathml.converter import convert

MARKED_MATH = re.compile(
    r'<(?P<tag>span|div) class="arithmatex">\s*\\[(\[](?P<tex>.*?)\\[)\]]\s*</(?P=tag)>', re.S
)
UNKNOWN_COMMAND = re.compile(r">(\\[A-Za-z]+)<")
# latex2mathml leaves a matrix's brackets loose in the formula's row, so they stretch to
# the tallest thing in it; in their own <mrow> they fit the matrix.
LOOSE_MATRIX = re.compile(
    r"(?<!<mrow>)(<mo>[^<]+</mo><mtable>(?:(?!<mtable>).)*?</mtable><mo>[^<]+</mo>)"
)


class MathError(ValueError):
    """A formula that cannot be written as MathML."""


def mathml(tex: str, display: bool) -> str:
    """One formula as a ``<math>`` element.

    >>> mathml(r"g_d", display=False)
    '<math xmlns="http://www.w3.org/1998/Math/MathML" display="inline"><mrow><msub><mi>g</mi><mi>d</mi></msub></mrow></math>'
    """
    try:
        written = convert(tex, display="block" if display else "inline")
    except Exception as error:  # latex2mathml raises bare token errors
        raise MathError(
            f"cannot read the TeX {tex!r} ({type(error).__name__}: {error}); "
            f"check its braces and commands"
        ) from error
    if unknown := UNKNOWN_COMMAND.search(written):
        raise MathError(
            f"the TeX {tex!r} uses {unknown[1]}, which latex2mathml does not know; "
            f"write it with the commands it has (see its README)"
        )
    return LOOSE_MATRIX.sub(r"<mrow>\1</mrow>", written)


def with_mathml(page_html: str, where: str) -> str:
    """The page with each arithmatex formula written as MathML; ``where`` names the page."""

    def replace(match: re.Match) -> str:
        try:
            written = mathml(html.unescape(match["tex"]), display=match["tag"] == "div")
        except MathError as error:
            raise MathError(f"{where}: {error}") from None
        if match["tag"] == "span":
            return f'<span class="arithmatex">{written}</span>'
        # A formula wider than a phone's screen scrolls: keyboards can reach it too.
        return f'<div class="arithmatex" tabindex="0">{written}</div>'

    return MARKED_MATH.sub(replace, page_html)
