"""A small YAML reader and writer for configuration files, in the standard library only.

The estimator must run unchanged under Pyodide with no third-party packages, so it cannot lean on
PyYAML. This module reads the subset of YAML 1.2 that configuration files use: block mappings and
sequences nested by indentation, flow sequences and mappings (``[0, 1]``, ``{a: 1}``), plain, single-
and double-quoted scalars, ``null``/``~``, booleans, integers, floats, comments, and ``|``/``>``
block scalars. Anchors, tags and multi-document streams are rejected with a clear error.
:func:`dump` writes plain block YAML that :func:`load` (and PyYAML) read back identically.

Hostile text gets a :class:`YamlError` too, in time linear in its length: a text longer than
:data:`~estimator.config.input_size.MAX_INPUT_BYTES` (1 MiB; the callers check it first, naming their field),
collections nested deeper than :data:`MAX_DEPTH` levels (a configuration needs three), integers longer than Python
converts (4,300 digits). :func:`load_json` applies the same limits to JSON, which the loaders also accept, and
refuses a key given twice in one object, as the YAML reader does (``json.loads`` keeps the last value).
"""

from __future__ import annotations

import json
import re

from .errors import show
from .input_size import MAX_INPUT_BYTES, size_problem

__all__ = ["MAX_DEPTH", "DuplicateKeyError", "YamlError", "dump", "load", "load_json"]

#: Deepest nesting of mappings and sequences accepted (a configuration file needs 3).
MAX_DEPTH = 32


class YamlError(ValueError):
    """The text is not YAML this reader understands; the message gives the line number."""


class DuplicateKeyError(YamlError):
    """A key given twice in one mapping (YAML) or object (JSON): refused, never the last value silently."""


def _too_deep(lineno) -> YamlError:
    return YamlError(f"line {lineno}: collections nested deeper than {MAX_DEPTH} levels")


def _int(t: str, lineno: int) -> int:
    try:
        return int(t)
    except ValueError:       # more digits than Python converts (sys.get_int_max_str_digits)
        raise YamlError(f"line {lineno}: the number {show(t)} has {len(t):,} digits, too many to read") from None


_SPECIAL = re.compile(r"[\[\]{}\"'\\\n]")


def nesting_depth(text: str, *, quotes: str = "\"'", stop: int = MAX_DEPTH) -> tuple[int, int]:
    """(deepest bracket nesting, line where it first exceeds ``stop``) of a JSON or YAML flow text, outside
    quoted strings; one pass over the special characters, stopping at the first excess."""
    depth = deepest = 0
    quote = None
    line = 1
    escaped = False
    for match in _SPECIAL.finditer(text):
        c = match.group()
        if escaped:
            escaped = False
            if c != "\n":
                continue
        if c == "\n":
            line += 1
            continue
        if quote:
            if c == "\\" and quote == '"':
                escaped = match.end() < len(text) and text[match.end()] in "\\\"'[]{}\n"
            elif c == quote:
                quote = None
            continue
        if c in quotes:
            quote = c
        elif c in "[{":
            depth += 1
            if depth > deepest:
                deepest = depth
                if deepest > stop:
                    return deepest, line
        elif c in "]}":
            depth -= 1
    return deepest, line


def _check_size(text: str, limit: int) -> None:
    too_large = size_problem(len(text), "text", "the text", limit)
    if too_large:
        raise YamlError(too_large.message)


class _DuplicateKey(ValueError):
    pass


def _unique(pairs: list) -> dict:
    """``json.loads``'s object hook: the object, or :class:`_DuplicateKey` naming a key given twice."""
    out = dict(pairs)
    if len(out) != len(pairs):
        seen = set()
        for key, _ in pairs:
            if key in seen:
                raise _DuplicateKey(key)
            seen.add(key)
    return out


def load_json(text: str, *, limit: int = MAX_INPUT_BYTES):
    """Parse JSON text with this module's limits (at most ``limit`` characters); every failure is a
    :class:`YamlError` naming the line, or for a key given twice in one object, the key."""
    _check_size(text, limit)
    deepest, line = nesting_depth(text, quotes='"')
    if deepest > MAX_DEPTH:
        raise _too_deep(line)
    try:
        return json.loads(text, object_pairs_hook=_unique)
    except json.JSONDecodeError as exc:
        raise YamlError(f"line {exc.lineno}: {exc.msg}") from None
    except _DuplicateKey as exc:
        raise DuplicateKeyError(f"duplicate key {show(exc.args[0])} (a key may appear once in an object)") from None
    except ValueError:        # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise YamlError("a number has more than 4,300 digits, too many to read") from None


_INT = re.compile(r"^[-+]?(0|[1-9][0-9_]*)$")
_FLOAT = re.compile(r"^[-+]?(\.[0-9]+|[0-9][0-9_]*(\.[0-9]*)?)([eE][-+]?[0-9]+)?$")


def _scalar(text: str, lineno: int):
    t = text.strip()
    if t == "" or t in ("~", "null", "Null", "NULL"):
        return None
    if t in ("true", "True", "TRUE"):
        return True
    if t in ("false", "False", "FALSE"):
        return False
    if t[0] in "\"'":
        return _quoted(t, lineno)
    if t[0] in "&*!":
        raise YamlError(f"line {lineno}: anchors, aliases and tags are not supported: {show(t)}")
    if _INT.match(t):
        return _int(t.replace("_", ""), lineno)
    if _FLOAT.match(t) and any(c in t for c in ".eE"):
        return float(t.replace("_", ""))
    if t in (".inf", "+.inf"):
        return float("inf")
    if t == "-.inf":
        return float("-inf")
    if t == ".nan":
        return float("nan")
    return t


def _quoted(t: str, lineno: int) -> str:
    q = t[0]
    if len(t) < 2 or t[-1] != q:
        raise YamlError(f"line {lineno}: unterminated quoted string {show(t)}")
    body = t[1:-1]
    if q == "'":
        return body.replace("''", "'")
    out, i = [], 0
    esc = {"n": "\n", "t": "\t", '"': '"', "\\": "\\", "/": "/", "0": "\0", "r": "\r"}
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            out.append(esc.get(body[i + 1], body[i + 1]))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _strip_comment(line: str) -> str:
    """Remove a trailing comment (a ``#`` at the start or after whitespace, outside quotes)."""
    if "#" not in line:
        return line.rstrip()
    quote = None
    depth = 0
    for i, c in enumerate(line):
        if quote:
            if c == quote:
                quote = None
            continue
        if c in "\"'" and (i == 0 or line[i - 1] in " \t[{,:-"):
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        elif c == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _split_flow(body: str, lineno: int) -> list[str]:
    parts, depth, quote, cur = [], 0, None, []
    for c in body:
        if quote:
            cur.append(c)
            if c == quote:
                quote = None
            continue
        if c in "\"'":
            quote = c
        elif c in "[{":
            depth += 1
        elif c in "]}":
            depth -= 1
        if c == "," and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if quote or depth:
        raise YamlError(f"line {lineno}: unbalanced flow collection")
    if "".join(cur).strip():
        parts.append("".join(cur))
    return [p.strip() for p in parts]


def _flow(t: str, lineno: int, depth: int = 0):
    t = t.strip()
    if depth > MAX_DEPTH or (depth == 0 and nesting_depth(t)[0] > MAX_DEPTH):   # checked before the
        raise _too_deep(lineno)                                                # recursion (quadratic in depth)
    if t.startswith("["):
        if not t.endswith("]"):
            raise YamlError(f"line {lineno}: unterminated flow sequence {show(t)}")
        return [_flow(p, lineno, depth + 1) for p in _split_flow(t[1:-1], lineno)]
    if t.startswith("{"):
        if not t.endswith("}"):
            raise YamlError(f"line {lineno}: unterminated flow mapping {show(t)}")
        out = {}
        for p in _split_flow(t[1:-1], lineno):
            k, sep, v = p.partition(":")
            if not sep:
                raise YamlError(f"line {lineno}: expected 'key: value' in {show(p)}")
            key = _scalar(k, lineno)
            if key in out:
                raise DuplicateKeyError(f"line {lineno}: duplicate key {show(key)}")
            out[key] = _flow(v, lineno, depth + 1)
        return out
    return _scalar(t, lineno)


def _key_split(content: str):
    """Split 'key: value' at the first ': ' (or trailing ':') outside quotes; None if not a mapping entry."""
    quote = None
    for i, c in enumerate(content):
        if quote:
            if c == quote:
                quote = None
            continue
        if c in "\"'" and i == 0:
            quote = c
        elif c == ":" and (i + 1 == len(content) or content[i + 1] in " \t"):
            return content[:i].strip(), content[i + 1:].strip()
        elif c in "[{" and i == 0:
            return None
    return None


class _Reader:
    def __init__(self, text: str):
        self.raw = text.splitlines()
        self.lines: list[tuple[int, int, str]] = []  # (lineno, indent, content)
        for n, line in enumerate(self.raw, 1):
            if "\t" in line[: len(line) - len(line.lstrip())]:
                raise YamlError(f"line {n}: tabs are not allowed for indentation")
            s = _strip_comment(line)
            if not s.strip():
                continue
            if s.strip() in ("---", "...") and len(self.lines) == 0:
                continue
            if s.strip() == "---":
                raise YamlError(f"line {n}: multi-document streams are not supported")
            self.lines.append((n, len(s) - len(s.lstrip()), s.strip()))
        self.i = 0
        self.depth = 0

    def parse(self):
        if not self.lines:
            return None
        value = self.block(self.lines[0][1])
        if self.i < len(self.lines):
            n, _, c = self.lines[self.i]
            raise YamlError(f"line {n}: unexpected content {show(c)} (check the indentation)")
        return value

    def block(self, indent: int):
        n, ind, content = self.lines[self.i]
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _too_deep(n)
        try:
            if content == "-" or content.startswith("- "):
                return self.sequence(ind)
            if _key_split(content) is not None:
                return self.mapping(ind)
            self.i += 1
            return _flow(content, n)
        finally:
            self.depth -= 1

    def value_after(self, rest: str, n: int, indent: int):
        if rest in ("|", "|-", "|+", ">", ">-", ">+"):
            return self.block_scalar(rest, indent)
        if rest:
            if rest[0] in "[{":
                return _flow(rest, n)
            return _scalar(self.folded(rest, n, indent), n)
        if self.i < len(self.lines) and (self.lines[self.i][1] > indent or (
                self.lines[self.i][1] == indent and self.lines[self.i][2].startswith("-"))):
            return self.block(self.lines[self.i][1])
        return None

    def folded(self, first: str, n: int, indent: int) -> str:
        """A flow scalar continued on the following lines that are indented deeper than its key (PyYAML wraps long
        strings so, at 80 columns): the line breaks fold into spaces, an empty line into a newline, and in a
        double-quoted string a ``\\`` at the end of a line joins without a space (YAML 1.2 7.3, 7.5). Quoted
        continuations are read from the raw lines (a ``#`` in them is text)."""
        quoted = first[0] in "\"'"
        text, blank, j, last = first, 0, n, n
        while j < len(self.raw):
            line = self.raw[j]
            j += 1
            if not line.strip():
                blank += 1
                continue
            if len(line) - len(line.lstrip()) <= indent:
                break
            part = line.strip() if quoted else _strip_comment(line).strip()
            if not part:                       # a comment line ends a plain scalar
                break
            if first[0] == '"' and not blank and (len(text) - len(text.rstrip("\\"))) % 2 == 1:
                text = text[:-1] + part        # an escaped line break
            else:
                text += ("\n" * blank if blank else " ") + part
            blank, last = 0, j
        while self.i < len(self.lines) and self.lines[self.i][0] <= last:
            self.i += 1
        return text

    def mapping(self, indent: int) -> dict:
        out: dict = {}
        while self.i < len(self.lines):
            n, ind, content = self.lines[self.i]
            if ind < indent:
                break
            if ind > indent:
                raise YamlError(f"line {n}: unexpected indentation")
            kv = _key_split(content)
            if kv is None:
                raise YamlError(f"line {n}: expected 'key: value', got {show(content)}")
            key = _scalar(kv[0], n)
            if key in out:
                raise DuplicateKeyError(f"line {n}: duplicate key {show(key)}")
            self.i += 1
            out[key] = self.value_after(kv[1], n, indent)
        return out

    def sequence(self, indent: int) -> list:
        out = []
        while self.i < len(self.lines):
            n, ind, content = self.lines[self.i]
            if ind < indent or not (content == "-" or content.startswith("- ")):
                if ind > indent:
                    raise YamlError(f"line {n}: unexpected indentation")
                break
            rest = content[1:].strip()
            if not rest:
                self.i += 1
                out.append(self.value_after("", n, indent))
            elif _key_split(rest) is not None and rest[0] not in "[{":
                # A mapping that starts on the dash line: re-read it at the item's indentation.
                self.lines[self.i] = (n, ind + 2, rest)
                out.append(self.mapping(ind + 2))
            else:
                self.i += 1
                out.append(self.value_after(rest, n, indent))
        return out

    def block_scalar(self, style: str, indent: int) -> str:
        # Block scalars need the raw lines: comments inside them are text.
        start = self.lines[self.i - 1][0]
        body, j = [], start
        while j < len(self.raw):
            line = self.raw[j]
            if line.strip() and len(line) - len(line.lstrip()) <= indent:
                break
            body.append(line)
            j += 1
        while self.i < len(self.lines) and self.lines[self.i][0] <= j:
            self.i += 1
        texts = [b for b in body if b.strip()]
        cut = min((len(b) - len(b.lstrip()) for b in texts), default=0)
        lines = [b[cut:] if b.strip() else "" for b in body]
        while lines and not lines[-1]:
            lines.pop()
        text = "\n".join(lines) if style[0] == "|" else " ".join(x for x in lines if x)
        return text if style.endswith("-") else text + "\n"


def load(text: str):
    """Parse YAML text (at most :data:`~estimator.config.input_size.MAX_INPUT_BYTES` characters) into plain Python
    values (dict, list, str, int, float, bool, None)."""
    _check_size(text, MAX_INPUT_BYTES)
    return _Reader(text).parse()


_PLAIN_SAFE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.\-/ ]*$")


def _emit_scalar(v) -> str:
    if v is None:
        return "null"
    if v is True:
        return "true"
    if v is False:
        return "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        r = repr(v)
        if "e" in r and "." not in r:      # 1e-05 -> 1.0e-05, which YAML 1.1 readers (PyYAML) also take as a float
            mant, exp = r.split("e")
            r = f"{mant}.0e{exp}"
        return r if any(c in r for c in ".en") else r + ".0"
    s = str(v)
    if _PLAIN_SAFE.match(s) and _scalar(s, 0) == s and not s.endswith(" "):
        return s
    # (line breaks, tabs and carriage returns escaped: a double-quoted scalar must stay on one line here)
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") \
        .replace("\t", "\\t") + '"'


def dump(data, indent: int = 0) -> str:
    """Write plain values as block YAML (lists of scalars in flow style)."""
    pad = " " * indent
    lines = []
    if isinstance(data, dict):
        for k, v in data.items():
            if isinstance(v, dict) and v:
                lines.append(f"{pad}{_emit_scalar(k)}:")
                lines.append(dump(v, indent + 2).rstrip("\n"))
            elif isinstance(v, (list, tuple)) and v and any(isinstance(x, (dict, list)) for x in v):
                lines.append(f"{pad}{_emit_scalar(k)}:")
                lines.append(dump(list(v), indent + 2).rstrip("\n"))
            elif isinstance(v, (list, tuple)):
                lines.append(f"{pad}{_emit_scalar(k)}: [{', '.join(_emit_scalar(x) for x in v)}]")
            elif isinstance(v, dict):
                lines.append(f"{pad}{_emit_scalar(k)}: {{}}")
            else:
                lines.append(f"{pad}{_emit_scalar(k)}: {_emit_scalar(v)}")
    elif isinstance(data, (list, tuple)):
        for v in data:
            if isinstance(v, dict):
                body = dump(v, indent + 2).rstrip("\n").splitlines()
                lines.append(f"{pad}- {body[0].strip()}")
                lines.extend(body[1:])
            else:
                lines.append(f"{pad}- {_emit_scalar(v)}")
    else:
        lines.append(pad + _emit_scalar(data))
    return "\n".join(lines) + "\n"
