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


GENERAL_CATEGORIES = frozenset(
    {
        "L",
        "Lu",
        "Ll",
        "Lt",
        "Lm",
        "Lo",
        "M",
        "Mn",
        "Mc",
        "Me",
        "N",
        "Nd",
        "Nl",
        "No",
        "P",
        "Pc",
        "Pd",
        "Ps",
        "Pe",
        "Pi",
        "Pf",
        "Po",
        "S",
        "Sm",
        "Sc",
        "Sk",
        "So",
        "Z",
        "Zs",
        "Zl",
        "Zp",
        "C",
        "Cc",
        "Cf",
        "Cs",
        "Co",
        "Cn",
    }
)
"""The Unicode general categories, which ``\\p{..}`` names alike in Java and ``regex``. Every
other property name is refused: Java's POSIX classes (``\\p{Alnum}``, ``\\p{Punct}``, ...) are
US-ASCII unless UNICODE_CHARACTER_CLASS is set, where ``regex`` makes them Unicode, and Java's
``Is``/``In``/``java`` forms differ from ``regex``'s or are missing there."""
UNTRANSLATED = {
    "Q": "quoting (\\Q...\\E)",
    "E": "quoting (\\Q...\\E)",
    "h": "Java's horizontal whitespace class",
    "H": "Java's horizontal whitespace class",
    "v": "Java's vertical whitespace class (one character in Python)",
    "V": "Java's vertical whitespace class",
    "R": "Java's linebreak matcher",
    "X": "Java's grapheme cluster",
    "Z": "Java's end of input before a final line terminator",
    "z": "Java's end of input",
    "G": "Java's end of the previous match",
    "k": "a named back-reference",
}
"""Escapes whose meaning differs between Java and ``regex``, or that ``regex`` lacks."""


def _property(source: str, i: int, java: str) -> int:
    """Check the ``\\p``/``\\P`` escape at ``i``; the index just after it."""
    if source[i + 2 : i + 3] == "{":
        end = source.find("}", i + 3)
        if end < 0:
            raise ValueError(f"{java!r}: an unterminated \\p{{...}}")
        name, after = source[i + 3 : end], end + 1
    else:
        name, after = source[i + 2 : i + 3], i + 3
    if name not in GENERAL_CATEGORIES:
        raise ValueError(
            f"{java!r}: \\p{{{name}}} is not a Unicode general category; Java and regex may disagree "
            "on it (POSIX classes are ASCII in Java)"
        )
    return after


def translate(java: str) -> str:
    """A Java/Smithy regex as an equivalent pattern for the ``regex`` module; ValueError for a
    construct whose meaning it cannot carry over faithfully (so that a new model's pattern is
    never checked more leniently than AWS checks it)."""
    source = java.replace(SURROGATE_PAIR_RANGE, SUPPLEMENTARY_RANGE)
    out: list[str] = []
    in_class = False
    i = 0
    while i < len(source):
        char = source[i]
        if char == "\\" and i + 1 < len(source):
            nxt = source[i + 1]
            if nxt in "pP":
                after = _property(source, i, java)
                out.append(source[i:after])
                i = after
                continue
            if nxt in UNTRANSLATED:
                raise ValueError(f"{java!r}: \\{nxt} ({UNTRANSLATED[nxt]}) is not translated")
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
            raise ValueError(f"{java!r}: a nested class (Java's union) is not translated")
        elif char == "&" and in_class and source[i + 1 : i + 2] == "&":
            raise ValueError(f"{java!r}: a class intersection (&&) is not translated")
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
