"""A small interpreter of the Cloud Workflows subset the rebalancer uses, to run its source
against a fake Compute API. It refuses anything outside that subset rather than guess.

Expressions (https://cloud.google.com/workflows/docs/reference/syntax/expressions, "Supported
elements"): numbers, strings, ``true``/``false``/``null``, variables, ``object.field``,
``list[index]``, ``+`` (numbers, or two strings), ``-``, ``*``, ``/`` (float division), ``//``
(floor division), ``%``, parentheses, ``==``/``!=``/``<``/``<=``/``>``/``>=``, ``and``/``or``/
``not``, ``in`` (a value in a list, a key in a map), function calls, and list literals
(``map.get``'s key list: https://cloud.google.com/workflows/docs/reference/stdlib/map/get). No
map literal: a map is defined as YAML in an ``assign`` step
(https://cloud.google.com/workflows/docs/reference/syntax/maps).

Steps (https://cloud.google.com/workflows/docs/reference/syntax): ``assign``, ``switch`` (a case's
``assign``, ``steps``, ``return``), ``for`` over ``in`` or an inclusive ``range``, with variables
created in its body gone after it (https://cloud.google.com/workflows/docs/reference/syntax/iteration),
``call`` (the HTTP functions and ``sys.sleep``), ``try``/``retry`` with ``http.default_retry``
(429, 502, 503, 504 retried up to 5 times:
https://cloud.google.com/workflows/docs/reference/stdlib/http/default_retry), ``return``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

TOKEN = re.compile(
    r"\s*(?:(?P<num>\d+(?:\.\d+)?)|(?P<str>\"(?:[^\"\\]|\\.)*\")|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
    r"|(?P<op>//|==|!=|<=|>=|[-+*/%<>()\[\].,]))"
)
KEYWORDS = {"and", "or", "not", "in", "true", "false", "null"}
RETRIED = {429, 502, 503, 504}


class Refused(Exception):
    """Something outside the subset (or outside Workflows)."""


class HttpError(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


class Returned(Exception):
    def __init__(self, value: Any) -> None:
        self.value = value


def tokens(text: str) -> list[tuple[str, str]]:
    out, pos = [], 0
    while pos < len(text):
        if not text[pos:].strip():
            break
        m = TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise Refused(f"not Workflows expression syntax at {text[pos:]!r}")
        kind = m.lastgroup or ""
        out.append((kind, m.group(kind)))
        pos = m.end()
    return out


class Parser:
    """Recursive descent over the tokens, evaluating as it goes against ``env``."""

    def __init__(
        self, text: str, env: Callable[[str], Any], functions: dict[str, Callable[..., Any]]
    ) -> None:
        self.toks, self.i, self.env, self.functions = tokens(text), 0, env, functions

    def peek(self) -> str | None:
        return self.toks[self.i][1] if self.i < len(self.toks) else None

    def take(self, value: str | None = None) -> tuple[str, str]:
        if self.i >= len(self.toks) or (value is not None and self.toks[self.i][1] != value):
            raise Refused(f"expected {value!r} at token {self.i}")
        self.i += 1
        return self.toks[self.i - 1]

    def parse(self) -> Any:
        value = self.or_()
        if self.i != len(self.toks):
            raise Refused(f"trailing tokens {self.toks[self.i :]}")
        return value

    def or_(self) -> Any:
        value = self.and_()
        while self.peek() == "or":
            self.take()
            right = self.and_()
            value = _bool(value) or _bool(right)
        return value

    def and_(self) -> Any:
        value = self.not_()
        while self.peek() == "and":
            self.take()
            right = self.not_()
            value = _bool(value) and _bool(right)
        return value

    def not_(self) -> Any:
        if self.peek() == "not":
            self.take()
            return not _bool(self.not_())
        return self.compare()

    def compare(self) -> Any:
        left = self.add()
        op = self.peek()
        if op in ("==", "!=", "<", "<=", ">", ">=", "in"):
            self.take()
            right = self.add()
            if op == "in":
                if not isinstance(right, (list, dict)):
                    raise Refused("in needs a list or a map")
                return left in right
            return {
                "==": lambda: left == right,
                "!=": lambda: left != right,
                "<": lambda: left < right,
                "<=": lambda: left <= right,
                ">": lambda: left > right,
                ">=": lambda: left >= right,
            }[op]()
        return left

    def add(self) -> Any:
        value = self.mul()
        while self.peek() in ("+", "-"):
            op = self.take()[1]
            right = self.mul()
            if op == "+" and isinstance(value, str) != isinstance(right, str):
                raise Refused("+ of a string and a non-string (Workflows needs string())")
            value = value + right if op == "+" else _num(value) - _num(right)
        return value

    def mul(self) -> Any:
        value = self.unary()
        while self.peek() in ("*", "/", "//", "%"):
            op = self.take()[1]
            a, b = _num(value), _num(self.unary())
            value = {"*": a * b, "/": a / b, "//": a // b, "%": a % b}[op]
        return value

    def unary(self) -> Any:
        if self.peek() == "-":
            self.take()
            return -_num(self.unary())
        return self.postfix()

    def postfix(self) -> Any:
        kind, text = self.take()
        if kind == "name" and text not in KEYWORDS and self.peek() in (".", "("):
            dotted = text
            while self.peek() == "." and dotted.split(".")[0] in {
                "sys",
                "json",
                "text",
                "map",
                "list",
                "http",
            }:
                self.take(".")
                dotted += "." + self.take()[1]
            if self.peek() == "(":
                value = self.call(dotted)
            elif dotted in self.functions:
                value = self.functions[dotted]  # e.g. http.default_retry, a policy value
            else:
                value = self.env(dotted)
        else:
            value = self.primary(kind, text)
        while self.peek() in (".", "["):
            if self.take()[1] == ".":
                key = self.take()[1]
                if not isinstance(value, dict) or key not in value:
                    raise KeyError(f"no field {key!r}")
                value = value[key]
            else:
                index = self.or_()
                self.take("]")
                value = value[index]
        return value

    def call(self, name: str) -> Any:
        if name not in self.functions:
            raise Refused(f"a function the interpreter does not know: {name}")
        self.take("(")
        args = []
        while self.peek() != ")":
            args.append(self.or_())
            if self.peek() == ",":
                self.take(",")
        self.take(")")
        return self.functions[name](*args)

    def primary(self, kind: str, text: str) -> Any:
        if kind == "num":
            return float(text) if "." in text else int(text)
        if kind == "str":
            return json.loads(text)
        if kind == "name":
            if text in ("true", "false", "null"):
                return {"true": True, "false": False, "null": None}[text]
            if text in KEYWORDS:
                raise Refused(f"misplaced {text}")
            return self.env(text)
        if text == "(":
            value = self.or_()
            self.take(")")
            return value
        if text == "[":
            items = []
            while self.peek() != "]":
                items.append(self.or_())
                if self.peek() == ",":
                    self.take(",")
            self.take("]")
            return items
        raise Refused(f"not an expression element: {text!r}")


def _num(value: Any) -> int | float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Refused(f"arithmetic on {value!r}")
    return value


def _bool(value: Any) -> bool:
    if not isinstance(value, bool):
        raise Refused(f"a logical operator on {value!r}")
    return value


def _map_get(m: Any, keys: Any) -> Any:
    for key in [keys] if isinstance(keys, str) else keys:
        if not isinstance(m, dict) or key not in m:
            return None
        m = m[key]
    return m


def _int(value: Any) -> int:
    if isinstance(value, str):
        if not re.fullmatch(r"-?\d+", value):
            raise Refused(f"int({value!r})")
        return int(value)
    return int(_num(value))


def _string(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


class Workflow:
    """Runs ``definition`` with ``env`` as its environment variables, ``http(method, args)`` as
    the HTTP functions and a clock that ``sys.sleep`` advances (``on_sleep`` sees the new time)."""

    def __init__(
        self,
        definition: dict[str, Any],
        env: dict[str, str],
        http: Callable[[str, dict[str, Any]], Any],
        now: float,
        on_sleep: Callable[[float], None] = lambda t: None,
    ) -> None:
        self.definition, self.http, self.now, self.on_sleep = definition, http, now, on_sleep
        self.scope: dict[str, Any] = {}
        self.retries = 0
        self.functions: dict[str, Any] = {
            "sys.get_env": lambda k: env[k],
            "sys.now": lambda: self.now,
            "json.decode": lambda t: json.loads(t),
            "json.encode_to_string": lambda v: json.dumps(v),
            "text.match_regex": lambda s, r: re.search(r, s) is not None,
            "map.get": _map_get,
            "list.concat": lambda xs, v: [*xs, v],
            "default": lambda v, d: d if v is None else v,
            "len": len,
            "int": _int,
            "string": _string,
            "http.default_retry": "http.default_retry",
        }

    def lookup(self, name: str) -> Any:
        if name not in self.scope:
            raise Refused(f"a variable that does not exist here: {name}")
        return self.scope[name]

    def ev(self, value: Any) -> Any:
        if isinstance(value, str):
            if value.startswith("${") and value.endswith("}"):
                return Parser(value[2:-1], self.lookup, self.functions).parse()
            if "${" in value:
                raise Refused(f"an expression inside a string: {value!r}")
            return value
        if isinstance(value, dict):
            return {k: self.ev(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self.ev(v) for v in value]
        return value

    def assign(self, items: list[dict[str, Any]]) -> None:
        for item in items:
            ((key, value),) = item.items()
            self.scope[key] = self.ev(value)

    def call(self, body: dict[str, Any]) -> None:
        name = body["call"]
        args = {k: (v if k == "auth" else self.ev(v)) for k, v in body.get("args", {}).items()}
        if name == "sys.sleep":
            self.now += args["seconds"]
            self.on_sleep(self.now)
            result = None
        elif name in ("http.get", "http.post"):
            result = self.http(name, args)
        else:
            raise Refused(f"a call the interpreter does not know: {name}")
        if "result" in body:
            self.scope[body["result"]] = result

    def run(self, steps: list[dict[str, Any]]) -> None:
        for step in steps:
            ((_, body),) = step.items()
            self.step(body)

    def step(self, body: dict[str, Any]) -> None:
        kinds = set(body) & {"assign", "switch", "for", "call", "try", "return"}
        if len(kinds) != 1:
            raise Refused(f"a step the interpreter does not know: {body}")
        if "assign" in body:
            self.assign(body["assign"])
        elif "switch" in body:
            for case in body["switch"]:
                if _bool(self.ev(case["condition"])):
                    self.assign(case.get("assign", []))
                    self.run(case.get("steps", []))
                    if "return" in case:
                        raise Returned(self.ev(case["return"]))
                    break
        elif "for" in body:
            loop = body["for"]
            if "in" in loop:
                items = list(self.ev(loop["in"]))
            else:
                low, high = (self.ev(x) for x in loop["range"])
                items = list(range(low, high + 1))  # an inclusive range
            before = set(self.scope)
            for item in items:
                self.scope[loop["value"]] = item
                self.run(loop["steps"])
            for created in set(self.scope) - before:
                del self.scope[created]
        elif "try" in body:
            if self.ev(body.get("retry")) != "http.default_retry":
                raise Refused(f"a retry policy the interpreter does not know: {body.get('retry')}")
            for attempt in range(6):
                try:
                    self.step(body["try"])
                    break
                except HttpError as error:
                    if error.code not in RETRIED or attempt == 5:
                        raise
                    self.retries += 1
        elif "call" in body:
            self.call(body)
        else:
            raise Returned(self.ev(body["return"]))

    def execute(self) -> Any:
        if list(self.definition) != ["main"]:
            raise Refused("only a main workflow")
        try:
            self.run(self.definition["main"]["steps"])
        except Returned as done:
            return done.value
        raise Refused("the workflow ended without a return")
