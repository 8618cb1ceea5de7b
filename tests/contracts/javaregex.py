"""The ``pattern`` of a botocore (Smithy) shape, compiled with the semantics AWS applies.

AWS's services are written in Java and match a member against its pattern with
``String.matches``, that is against the whole value, and botocore's validator does not check
patterns at all (``botocore/validate.py``: ``VALIDATED_METADATA_ATTRS`` holds only required, min,
document and union). Three differences from Python's regexes matter for the installed models:

* ``\\p{L}``, ``\\p{Z}``, ``\\p{N}`` (Unicode categories): Python's ``re`` has none; the
  third-party ``regex`` module has them.
* ``\\w``, ``\\d`` and ``\\s`` are ASCII in Java unless UNICODE_CHARACTER_CLASS is set
  (https://docs.oracle.com/javase/8/docs/api/java/util/regex/Pattern.html, "Predefined character
  classes"): Python makes them Unicode, and ``regex.ASCII`` would also narrow ``\\p{L}``, so they
  are spelt out as ASCII sets instead.
* Java strings are UTF-16: a pattern names supplementary characters as a surrogate pair range
  (``\\uD800\\uDC00-\\uDBFF\\uDFFF`` in Auto Scaling's XML-character pattern), which Python, whose
  strings are code points, spells ``\\U00010000-\\U0010FFFF``.
"""

from __future__ import annotations

import functools

import regex

ASCII_CLASSES = {"w": "A-Za-z0-9_", "d": "0-9", "s": " \\t\\n\\x0B\\f\\r"}
"""Java's predefined classes without UNICODE_CHARACTER_CLASS (java.util.regex.Pattern)."""
NEGATED = {"W": "w", "D": "d", "S": "s"}
SURROGATE_PAIR_RANGE = "\\uD800\\uDC00-\\uDBFF\\uDFFF"
SUPPLEMENTARY_RANGE = "\\U00010000-\\U0010FFFF"


def translate(java: str) -> str:
    """A Java/Smithy regex as an equivalent pattern for the ``regex`` module."""
    source = java.replace(SURROGATE_PAIR_RANGE, SUPPLEMENTARY_RANGE)
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(source):
        char = source[i]
        if char == "\\" and i + 1 < len(source):
            nxt = source[i + 1]
            if nxt in ASCII_CLASSES:
                members = ASCII_CLASSES[nxt]
                out.append(members if in_class else f"[{members}]")
            elif nxt in NEGATED:
                if in_class:
                    raise ValueError(f"{java!r}: a negated class inside a class is not translated")
                out.append(f"[^{ASCII_CLASSES[NEGATED[nxt]]}]")
            else:
                out.append(source[i : i + 2])
            i += 2
            continue
        if char == "[" and not in_class:
            in_class = True
            out.append(char)
            if source[i + 1 : i + 2] == "^":
                out.append("^")
                i += 1
            if source[i + 1 : i + 2] == "]":  # a literal ] first in a class
                out.append("\\]")
                i += 1
        elif char == "]" and in_class:
            in_class = False
            out.append(char)
        elif char == "[" and in_class:
            out.append("\\[")  # Java treats a nested [ as a union; none of the models nests
        else:
            out.append(char)
        i += 1
    return "".join(out)


@functools.cache
def compiled(java: str) -> regex.Pattern[str]:
    """The translated pattern, compiled once (VERSION0: the ``re``-compatible syntax)."""
    return regex.compile(translate(java), regex.VERSION0)


def matches(java: str, value: str) -> bool:
    """Whether ``value`` matches ``java`` as a whole, as AWS's ``String.matches`` does."""
    return compiled(java).fullmatch(value) is not None
