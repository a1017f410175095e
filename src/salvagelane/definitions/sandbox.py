"""The prompt templates' sandbox: Jinja2's immutable sandbox, with bounds on the work.

Jinja2's sandbox stops a template from reaching Python internals, but not from building
a value of any size: ``{{ 'a' * 100000000 }}`` renders, and a loop that doubles a
string grows it until memory runs out. Here every operation that can grow a value is
checked before it runs (``*``, ``**``, ``%``, ``~``, string methods, the filters that
take a width, a count or a fill value), and everything a render makes is measured:

- no one value may be larger than ``max_value_bytes`` (a character counts as a byte);
- a render may make at most ``max_created_bytes`` in all (values, output, buffers);
- it may take at most ``max_steps`` steps (loop iterations, calls, filters, operators,
  and the items they walk) and ``max_cpu_seconds`` of its thread's CPU time;
- the rendered prompt is capped by the caller (``max_prompt_bytes``).

A render runs inside :func:`bounded` (a per-thread budget); outside it the per-value
checks still apply. Lists, dicts and sets cannot be modified (``l.append``): values are
built by expressions, which are checked, not by mutation, which could not be.
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import pprint
import re
import time
import types
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence, Sized
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any, cast

import jinja2
import jinja2.compiler
import jinja2.filters
import jinja2.nodes
import jinja2.runtime
import jinja2.sandbox
import markupsafe

MiB = 1024 * 1024
_MAX_INT_BITS = 1 << 16  # an integer of ~20,000 digits; Python will not print 4,300
_MAX_JSON_INDENT = 256
_CLOCK_EVERY = 64  # steps between two reads of the thread's CPU clock
_MACRO_STEPS = 20  # a macro call costs what about 20 loop iterations cost
_ITERATE = "_salvagelane_iterate"  # the global every {% for %} iterates through
# Filters that do not walk their input: charging its length would refuse `big | length`.
_CONSTANT_TIME_FILTERS = frozenset(
    {"attr", "count", "d", "default", "first", "last", "length", "random", "safe"}
)
# Filters that turn their input into text: a list or mapping is measured before str() runs.
_STRINGIFYING_FILTERS = frozenset(
    {
        "capitalize", "center", "e", "escape", "forceescape", "format", "indent", "lower",
        "replace", "safe", "string", "striptags", "title", "trim", "truncate", "upper",
        "urlencode", "urlize", "wordcount", "wordwrap", "xmlattr",
    }
)  # fmt: skip


@dataclass(frozen=True, kw_only=True, slots=True)
class RenderLimits:
    """The bounds on one render of a prompt (system and user templates together)."""

    max_prompt_bytes: int = 4 * MiB  # the rendered prompt, output contract included (UTF-8)
    max_value_bytes: int = 4 * MiB  # any one value a template builds
    max_created_bytes: int = 32 * MiB  # everything a render builds
    max_steps: int = 1_000_000
    max_cpu_seconds: float = 10.0


RENDER_LIMITS = RenderLimits()


class RenderLimitError(Exception):
    """A render would exceed one of its limits; the message says which and by what."""


class _Budget:
    __slots__ = ("_clock_at", "_cpu_deadline", "created", "limits", "steps")

    def __init__(self, limits: RenderLimits) -> None:
        self.limits = limits
        self.steps = 0
        self.created = 0
        self._clock_at = _CLOCK_EVERY
        self._cpu_deadline = time.thread_time() + limits.max_cpu_seconds

    def step(self, count: int = 1) -> None:
        self.steps += count
        if self.steps > self.limits.max_steps:
            raise RenderLimitError(
                f"more than {self.limits.max_steps} steps (loop iterations, calls, filters, "
                "operators and the items they walk)"
            )
        if self.steps >= self._clock_at:
            self._clock_at = self.steps + _CLOCK_EVERY
            if time.thread_time() > self._cpu_deadline:
                raise RenderLimitError(f"more than {self.limits.max_cpu_seconds:g} s of CPU time")

    def create(self, size: int) -> None:
        self.created += size
        if self.created > self.limits.max_created_bytes:
            raise RenderLimitError(
                f"more than {self.limits.max_created_bytes} bytes built in all "
                "(the limit for one render)"
            )


_BUDGET: ContextVar[_Budget | None] = ContextVar("salvagelane_render_budget", default=None)


@contextmanager
def bounded(limits: RenderLimits) -> Iterator[None]:
    """Within the block, renders in this thread share one budget of ``limits``."""
    token = _BUDGET.set(_Budget(limits))
    try:
        yield
    finally:
        _BUDGET.reset(token)


def _limits() -> RenderLimits:
    budget = _BUDGET.get()
    return RENDER_LIMITS if budget is None else budget.limits


def _step(count: int = 1) -> None:
    budget = _BUDGET.get()
    if budget is not None:
        budget.step(count)


def _allow(size: int, what: str) -> None:
    """Refuse, before it is built, a value of ``size`` bytes over the per-value limit."""
    limit = _limits().max_value_bytes
    if size > limit:
        raise RenderLimitError(
            f"{what} would build a value of {size} bytes (the limit for one value is {limit})"
        )


def _made(value: Any, what: str) -> Any:
    """``value``, once measured: over the per-value limit it is refused, else counted."""
    budget = _BUDGET.get()
    limit = (RENDER_LIMITS if budget is None else budget.limits).max_value_bytes
    size = len(value) if isinstance(value, str) else _size(value, limit)
    if size is None or size > limit:
        raise RenderLimitError(
            f"{what} built a value of more than {limit} bytes (the limit for one value)"
        )
    if budget is not None:
        budget.create(size)
    return value


def _size(value: Any, stop: int) -> int | None:
    """About how many bytes ``value`` holds with shared parts counted each time they occur
    (as ``join`` or ``str`` would expand them); None once that is more than ``stop``.
    Walking a container costs a step per item."""
    total = walked = 0
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str | bytes):
            total += len(item)
        elif item is None or isinstance(item, bool | float):
            total += 8
        elif isinstance(item, int):
            total += item.bit_length() // 8 + 1
        elif isinstance(item, list | tuple | set | frozenset):
            total += 8 * len(item)
            if total <= stop:
                pending.extend(item)
                walked += len(item)
        elif isinstance(item, Mapping):
            total += 16 * len(item)
            if total <= stop:
                pending.extend(item.keys())
                pending.extend(item.values())
                walked += len(item)
        # Anything else (macros, loops, generators, undefined values) is counted where
        # what it produces is.
        if total > stop:
            break
    if walked:
        _step(walked)
    return total if total <= stop else None


def _measured(value: Any, what: str) -> int:
    """The size of ``value`` (see _size) an operation is about to use; refused when that
    alone is over the per-value limit."""
    if isinstance(value, str):
        return len(value)
    limit = _limits().max_value_bytes
    size = _size(value, limit)
    if size is None:
        raise RenderLimitError(
            f"{what} would build a value of more than {limit} bytes (the limit for one value)"
        )
    return size


def _number(value: Any) -> int:
    """An int argument as given (a width, a count), 0 for anything else."""
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


# --- Checks for the operations that can grow a value --------------------------------------


def _check_repeat(left: Any, right: Any) -> None:
    if isinstance(left, int) and isinstance(right, int):
        bits = left.bit_length() + right.bit_length()
        if bits > _MAX_INT_BITS:
            raise RenderLimitError(
                f"'*' would build an integer of {bits} bits (the limit is {_MAX_INT_BITS})"
            )
        return
    sequence, count = (left, right) if isinstance(right, int) else (right, left)
    if isinstance(count, int) and isinstance(sequence, str | bytes | list | tuple):
        _allow(_measured(sequence, "'*'") * max(count, 0), "'*'")


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1:
        bits = base.bit_length() * exponent
        if bits > _MAX_INT_BITS:
            raise RenderLimitError(
                f"'**' would build an integer of about {bits} bits (the limit is {_MAX_INT_BITS})"
            )


_PERCENT_FIELD = re.compile(r"%(?:\([^)]*\))?[#0\- +]*(\*|\d+)?(?:\.(\*|\d+))?[hlL]?[a-zA-Z%]")
_DIGITS = re.compile(r"\d+")


def _width(digits: str, what: str) -> int:
    if len(digits) > 12:
        raise RenderLimitError(f"{what} would pad to a width of {len(digits)} digits")
    return int(digits)


def _check_percent(text: Any, arguments: Any, what: str) -> None:
    """``text % arguments``: the widths and precisions its fields ask for."""
    if not isinstance(text, str):
        return
    size = len(text) + _measured(arguments, what)
    starred = False
    for field in _PERCENT_FIELD.finditer(text):
        for given in field.groups():
            if given == "*":
                starred = True
            elif given:
                size += _width(given, what)
    if starred:  # widths taken from the arguments
        values = arguments if isinstance(arguments, tuple) else (arguments,)
        size += sum(abs(_number(value)) for value in values)
    _allow(size, what)


def _check_format_spec(spec: str, what: str) -> int:
    """The padding a ``str.format`` field spec asks for (``{:>100}``, ``{:.50f}``)."""
    size = sum(_width(digits, what) for digits in _DIGITS.findall(spec))
    _allow(size, what)
    return size


def _check_replace(text: str, old: Any, new: Any, count: Any, what: str) -> None:
    if not (isinstance(old, str) and isinstance(new, str)):
        return
    found = text.count(old) if old else len(text) + 1
    if isinstance(count, int) and count >= 0:
        found = min(found, count)
    _allow(len(text) + found * max(len(new) - len(old), 0), what)


def _check_join(separator: Any, items: Any, what: str) -> None:
    if isinstance(items, Sized):
        _allow(_measured(items, what) + len(str(separator)) * len(items), what)


def _check_string_method(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Check a call of a ``str`` method that can make its result much larger."""
    text = getattr(function, "__self__", None)
    if not isinstance(text, str):
        return
    name = getattr(function, "__name__", "")
    what = f"str.{name}"
    first = args[0] if args else None
    if name in ("center", "ljust", "rjust"):
        _allow(max(len(text), _number(kwargs.get("width", first))), what)
    elif name == "zfill":
        _allow(max(len(text), _number(first)), what)
    elif name == "expandtabs":
        tabsize = _number(kwargs.get("tabsize", 8 if first is None else first))
        _allow(len(text) + text.count("\t") * max(tabsize, 0), what)
    elif name == "replace" and len(args) >= 2:
        count = args[2] if len(args) > 2 else kwargs.get("count")
        _check_replace(text, args[0], args[1], count, what)
    elif name == "join":
        _check_join(text, first, what)
    elif name == "translate" and isinstance(first, Mapping):
        longest = max((len(v) for v in first.values() if isinstance(v, str)), default=1)
        _allow(len(text) * max(longest, 1), what)


# --- Filters -------------------------------------------------------------------------------


class _Consumed:
    """An iterator handed to a filter: every item is a step, and what the filter collects
    from it is bounded like any one value."""

    __slots__ = ("_iterator", "_size", "_what")

    def __init__(self, iterator: Iterator[Any], what: str) -> None:
        self._iterator = iterator
        self._size = 0
        self._what = what

    def __iter__(self) -> _Consumed:
        return self

    def __next__(self) -> Any:
        item = next(self._iterator)
        _step()
        limit = _limits().max_value_bytes
        self._size += _measured(item, self._what)
        if self._size > limit:
            raise RenderLimitError(
                f"{self._what} would collect more than {limit} bytes of items "
                "(the limit for one value)"
            )
        return item


def _bounded_filter(
    name: str, function: Callable[..., Any], check: Callable[..., None] | None = None
) -> Callable[..., Any]:
    # Filters marked pass_context / pass_eval_context / pass_environment take that first;
    # functools.wraps copies the mark, so Jinja2 passes it to the wrapper too.
    offset = 1 if getattr(function, "jinja_pass_arg", None) is not None else 0
    what = f"the filter {name!r}"

    @functools.wraps(function)
    def bounded_filter(*args: Any, **kwargs: Any) -> Any:
        _step()
        if len(args) > offset:
            value = args[offset]
            if isinstance(value, Iterator):
                args = (*args[:offset], _Consumed(value, what), *args[offset + 1 :])
            elif (
                isinstance(value, Sized)
                and not isinstance(value, str)
                and name not in _CONSTANT_TIME_FILTERS
            ):
                _step(len(value))
            if name in _STRINGIFYING_FILTERS and not isinstance(value, str):
                _measured(value, what)
            if check is not None:
                # Arguments the filter does not take: its own error says so, below.
                with contextlib.suppress(TypeError):
                    check(*args[offset:], **kwargs)
        return _made(function(*args, **kwargs), what)

    return bounded_filter


def _check_center(value: Any, width: Any = 80) -> None:
    what = "the filter 'center'"
    _allow(max(_measured(value, what), _number(width)), what)


def _check_indent(value: Any, width: Any = 4, first: Any = False, blank: Any = False) -> None:
    text = value if isinstance(value, str) else ""
    indent = len(width) if isinstance(width, str) else _number(width)
    what = "the filter 'indent'"
    _allow(_measured(value, what) + (text.count("\n") + 1) * indent, what)


def _check_wordwrap(
    value: Any,
    width: Any = 79,
    break_long_words: Any = True,
    wrapstring: Any = None,
    break_on_hyphens: Any = True,
) -> None:
    text = value if isinstance(value, str) else ""
    # Greedy wrapping: two consecutive lines hold more than `width` characters.
    lines = 2 * len(text) // max(_number(width), 1) + text.count("\n") + 2
    inserted = len(wrapstring) if isinstance(wrapstring, str) else 1
    what = "the filter 'wordwrap'"
    _allow(_measured(value, what) + lines * inserted, what)


def _check_format(value: Any, *args: Any, **kwargs: Any) -> None:
    _check_percent(value, kwargs or args, "the filter 'format'")


def _check_replace_filter(value: Any, old: Any, new: Any, count: Any = None) -> None:
    if isinstance(value, str):
        _check_replace(value, old, new, count, "the filter 'replace'")


def _check_join_filter(value: Any, d: Any = "", attribute: Any = None) -> None:
    _check_join(d, value, "the filter 'join'")


def _check_batch(value: Any, linecount: Any, fill_with: Any = None) -> None:
    if fill_with is not None:
        count = max(_number(linecount), 0)
        what = "the filter 'batch'"
        _allow((_measured(fill_with, what) + 8) * count, what)


def _check_urlize(
    value: Any,
    trim_url_limit: Any = None,
    nofollow: Any = False,
    target: Any = None,
    rel: Any = None,
    extra_schemes: Any = None,
) -> None:
    text = value if isinstance(value, str) else ""
    extra = sum(len(part) for part in (target, rel) if isinstance(part, str))
    # Each word may become a link: the URL twice, escaped, in an <a> with rel and target.
    what = "the filter 'urlize'"
    _allow(11 * _measured(value, what) + (len(text.split()) + 1) * (extra + 40), what)


class _Capped(io.StringIO):
    """A text stream that refuses to grow past ``limit`` characters."""

    def __init__(self, limit: int, what: str) -> None:
        super().__init__()
        self._size = 0
        self._limit = limit
        self._what = what

    def write(self, text: str) -> int:
        self._size += len(text)
        if self._size > self._limit:
            raise RenderLimitError(
                f"{self._what} would write more than {self._limit} bytes (the limit for one value)"
            )
        return super().write(text)


@jinja2.pass_eval_context
def _tojson(
    eval_ctx: jinja2.nodes.EvalContext, value: Any, indent: Any = None
) -> markupsafe.Markup:
    """Jinja2's ``tojson``, encoded in pieces that are counted as they come."""
    width = len(indent) if isinstance(indent, str) else _number(indent)
    if width > _MAX_JSON_INDENT:
        raise RenderLimitError(
            f"the filter 'tojson' would indent by {width} (the limit is {_MAX_JSON_INDENT})"
        )
    options = dict(eval_ctx.environment.policies["json.dumps_kwargs"])
    if indent is not None:
        options["indent"] = indent
    out = _Capped(_limits().max_value_bytes, "the filter 'tojson'")
    for piece in json.JSONEncoder(**options).iterencode(value):
        out.write(piece)
    text = out.getvalue()
    # As Jinja2's htmlsafe_json_dumps: safe to embed in HTML, whatever that is worth here.
    return markupsafe.Markup(
        text.replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("'", "\\u0027")
    )


def _pprint(value: Any) -> str:
    """Jinja2's ``pprint``, written to a stream that refuses to grow past the value limit."""
    out = _Capped(_limits().max_value_bytes, "the filter 'pprint'")
    pprint.PrettyPrinter(stream=out).pprint(value)
    return out.getvalue().removesuffix("\n")


def _sum(
    environment: jinja2.Environment, iterable: Any, attribute: Any = None, start: Any = 0
) -> Any:
    """Jinja2's ``sum``; lists and tuples are concatenated in one pass, not one copy per
    item (Python's ``sum`` of n lists copies n times)."""
    if not isinstance(start, list | tuple):
        return _JINJA_SUM(environment, iterable, attribute=attribute, start=start)
    if attribute is not None:
        getter = jinja2.filters.make_attrgetter(environment, attribute)
        iterable = map(getter, iterable)
    collected = list(start)
    for item in iterable:
        _step()
        collected.extend(item)
        _allow(8 * len(collected), "the filter 'sum'")
    return tuple(collected) if isinstance(start, tuple) else collected


_JINJA_SUM = jinja2.filters.FILTERS["sum"]

_CHECKS: dict[str, Callable[..., None]] = {
    "batch": _check_batch,
    "center": _check_center,
    "format": _check_format,
    "indent": _check_indent,
    "join": _check_join_filter,
    "replace": _check_replace_filter,
    "urlize": _check_urlize,
    "wordwrap": _check_wordwrap,
}
_REPLACED: dict[str, Callable[..., Any]] = {
    "pprint": _pprint,
    "sum": jinja2.pass_environment(_sum),
    "tojson": _tojson,
}


# --- The environment -----------------------------------------------------------------------


class _Counted:
    """What a ``{% for %}`` loop iterates: each item is a step. Its length is the
    iterable's, when that has one (``loop.length`` then costs nothing)."""

    __slots__ = ("_iterable",)

    def __init__(self, iterable: Any) -> None:
        self._iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        for item in self._iterable:
            _step()
            yield item

    def __len__(self) -> int:
        return len(self._iterable)


def _iterate(iterable: Any) -> Any:
    return _Counted(iterable) if isinstance(iterable, Sized) else _Counted(iter(iterable))


def _range(*args: int) -> range:
    return jinja2.sandbox.safe_range(*args)


def _finalize(value: Any) -> Any:
    """What ``{{ value }}`` writes, counted (also inside macros and blocks, which buffer
    their output where the prompt's size cap cannot see it yet)."""
    if not isinstance(value, str):
        _measured(value, "{{ ... }}")
    text = value if isinstance(value, str) else str(value)
    budget = _BUDGET.get()
    if budget is not None:
        budget.create(len(text))
    # Markup-like values stay themselves: in an {% autoescape %} block they are not escaped.
    return value if hasattr(value, "__html__") else text


def _count_loops(tree: jinja2.nodes.Template) -> jinja2.nodes.Template:
    """``tree`` with every ``{% for %}`` loop iterating through the counting global."""
    for loop in list(tree.find_all(jinja2.nodes.For)):
        wrapped = jinja2.nodes.Call(
            jinja2.nodes.Name(_ITERATE, "load"), [loop.iter], [], None, None
        )
        loop.iter = wrapped.set_lineno(loop.iter.lineno)
    return tree


class _CodeGenerator(jinja2.compiler.CodeGenerator):
    """Jinja2's code generator, with ``~`` going through the environment's check."""

    @jinja2.compiler.optimizeconst
    def visit_Concat(self, node: jinja2.nodes.Concat, frame: jinja2.compiler.Frame) -> None:
        self.write("environment.concat_values((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("), context.eval_ctx.autoescape)")


class _BoundedFormatter(jinja2.sandbox.SandboxedFormatter):
    """``str.format`` in the sandbox, checking each field's padding and the total."""

    def __init__(self, env: jinja2.Environment, **kwargs: Any) -> None:
        super().__init__(env, **kwargs)
        self._written = 0

    def vformat(self, format_string: str, args: Sequence[Any], kwargs: Mapping[str, Any]) -> str:
        self._written = 0  # per call: a bound .format may be called again
        return super().vformat(format_string, args, kwargs)

    def format_field(self, value: Any, format_spec: str) -> Any:
        _check_format_spec(format_spec, "str.format")
        if not isinstance(value, str):
            _measured(value, "str.format")
        text = super().format_field(value, format_spec)
        self._written += len(text)
        _allow(self._written, "str.format")
        return text


class _BoundedEscapeFormatter(_BoundedFormatter, markupsafe.EscapeFormatter):
    pass


class BoundedSandbox(jinja2.sandbox.ImmutableSandboxedEnvironment):
    """The sandbox prompt templates render in (see the module docstring)."""

    intercepted_binops = frozenset({"*", "**", "%", "+"})
    code_generator_class = _CodeGenerator

    def __init__(self, **options: Any) -> None:
        super().__init__(finalize=_finalize, **options)
        # Lorem ipsum has no place in a prompt, and lipsum(n) is n paragraphs.
        del self.globals["lipsum"]
        self.globals["range"] = _range
        self.globals[_ITERATE] = _iterate
        self.filters = {
            name: _bounded_filter(name, _REPLACED.get(name, function), _CHECKS.get(name))
            for name, function in self.filters.items()
        }

    def _parse(self, source: str, name: str | None, filename: str | None) -> jinja2.nodes.Template:
        return _count_loops(super()._parse(source, name, filename))

    def call_binop(
        self, context: jinja2.runtime.Context, operator: str, left: Any, right: Any
    ) -> Any:
        _step()
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        elif operator == "%":
            _check_percent(left, right, "'%'")
        return _made(self.binop_table[operator](left, right), repr(operator))

    def call(
        __self,  # Jinja2's signature: a template's keyword arguments may be named "self"
        __context: jinja2.runtime.Context,
        __obj: Any,
        *args: Any,
        **kwargs: Any,
    ) -> Any:
        if isinstance(__obj, jinja2.runtime.Macro):
            _step(_MACRO_STEPS)
            what = f"the macro {__obj.name!r}"
        else:
            _step()
            what = getattr(__obj, "__qualname__", None) or type(__obj).__name__
        if isinstance(args[0] if args else None, Iterator) and what == "str.join":
            args = (_Consumed(args[0], what), *args[1:])
        _check_string_method(__obj, args, kwargs)
        return _made(super().call(__context, __obj, *args, **kwargs), what)

    def concat(self, parts: Iterable[str]) -> str:
        """Joins a macro's, a block's or a template's output."""
        pieces = list(parts)
        _step(len(pieces))
        _allow(sum(len(piece) for piece in pieces), "the output of a macro or block")
        return cast(str, _made("".join(pieces), "the output of a macro or block"))

    def concat_values(self, values: tuple[Any, ...], autoescape: bool) -> str:
        """``a ~ b ~ c``."""
        _step(len(values))
        _allow(sum(_measured(value, "'~'") for value in values), "'~'")
        if autoescape:
            return cast(str, _made(jinja2.runtime.markup_join(values), "'~'"))
        texts = [value if isinstance(value, str) else str(value) for value in values]
        _allow(sum(len(text) for text in texts), "'~'")
        return cast(str, _made("".join(texts), "'~'"))

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """Jinja2's, with formatters that check each field (see _BoundedFormatter)."""
        if not isinstance(value, types.MethodType | types.BuiltinMethodType):
            return None
        if value.__name__ not in ("format", "format_map"):
            return None
        text = value.__self__
        if not isinstance(text, str):
            return None
        kind = type(text)
        is_format_map = value.__name__ == "format_map"
        formatter: _BoundedFormatter
        if isinstance(text, markupsafe.Markup):
            formatter = _BoundedEscapeFormatter(self, escape=text.escape)
        else:
            formatter = _BoundedFormatter(self)

        def wrapper(*args: Any, **kwargs: Any) -> str:
            if is_format_map:
                if kwargs:
                    raise TypeError("format_map() takes no keyword arguments")
                if len(args) != 1:
                    raise TypeError(f"format_map() takes exactly one argument ({len(args)} given)")
                kwargs = args[0]
                args = ()
            return kind(formatter.vformat(text, args, kwargs))

        return functools.update_wrapper(wrapper, value)
