r"""Named passes over LLVM IR modules, run in order by a :class:`Pipeline`, with a dump after each.

A pass is a documented function ``(module, context) -> module``: it gets a whole module, parsed
(:class:`pyjlad.ir.Module`, the default ``form="module"``) or as LLVM IR text (``form="text"``: only
passes that rewrite LLVM's syntax itself, like down-levelling to LLVM 15), and the pipeline's context
(what earlier passes found: the entry's symbol, the functions a module needs from outside, ...), and
returns the module it made. The pipeline parses and renders only where the form changes from one
pass to the next, so a run of module passes shares one parse. Each pass says in its docstring why it
exists (the Enzyme or LLVM reason) and is registered with what it changes, like the passes of
Numba's ``numba/core`` pipeline. Passes are tested one by one on small hand-written IR
(``tests/test_ir_passes.py``).

Setting ``PYJLAD_DUMP_IR`` to a directory writes the module after every pass of every pipeline,
and the module Enzyme got and the derivative it produced (see :func:`dump`), so every step from
Numba's IR to the derivative can be read::

    PYJLAD_DUMP_IR=/tmp/ir python script.py
    ls /tmp/ir/pyjlad_f/      # 01-portable.input.ll  02-portable.kind-specific-blas.ll ...

Examples
--------
>>> from dataclasses import dataclass
>>> @dataclass
... class Seen:
...     names: list
>>> def drop_body(module: Module, context: Seen) -> Module:
...     '''Make every definition a declaration (an example).'''
...     context.names.extend(f.name for f in module.definitions)
...     for function in module.definitions:
...         function.keyword, function.body = "declare", None
...     return module
>>> def shout(text: str, context: Seen) -> str:
...     '''Upper-case every line (an example of a text pass).'''
...     return text.upper()
>>> pipeline = Pipeline("example", (Pass("drop-body", drop_body, "function bodies"),
...                                 Pass("shout", shout, "every line", form="text")))
>>> context = Seen([])
>>> print(pipeline.run("define void @f() {\nentry:\n  ret void\n}\n", context, label="example"), end="")
DECLARE VOID @F()
>>> context.names
['f']
>>> print(pipeline.describe())
example:
  drop-body  Make every definition a declaration (an example).  [changes: function bodies]
  shout      Upper-case every line (an example of a text pass).  [changes: every line; LLVM IR text]
"""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .. import config
from ..errors import ArgumentError, SettingError
from .module import Module, parse

__all__ = ["DUMP_VARIABLE", "Pass", "Pipeline", "dump", "dump_directory", "module_text"]

#: The environment variable naming the directory :func:`dump` writes into (unset: no dumps; read by
#: :func:`pyjlad.config.dump_ir_directory`).
DUMP_VARIABLE = config.DUMP_IR_VARIABLE


@dataclass(frozen=True)
class Pass:
    """One named step of a :class:`Pipeline`.

    Attributes
    ----------
    name : str
        Short name, used in dumps and in README's pipeline (``"down-level"``).
    run : callable
        ``(module, context) -> module`` (``(text, context) -> text`` where ``form="text"``); its
        docstring's first line is the pass's summary.
    changes : str
        What the pass may change (``"function bodies"``, ``"nothing: a check"``), for the reader.
    form : str
        ``"module"`` (a parsed :class:`~pyjlad.ir.Module`) or ``"text"`` (LLVM IR text).
    """

    name: str
    run: Callable[[Any, Any], Any]
    changes: str
    form: str = "module"

    def __post_init__(self) -> None:
        if self.form not in ("module", "text"):
            raise ArgumentError(f"pass {self.name!r}: form must be 'module' or 'text', not {self.form!r}")

    @property
    def summary(self) -> str:
        """The first line of the pass function's docstring."""
        return (self.run.__doc__ or "").strip().splitlines()[0] if self.run.__doc__ else ""


@dataclass(frozen=True)
class Pipeline:
    """Passes run in order; each gets the module the one before it returned.

    Attributes
    ----------
    name : str
        The pipeline's name, the prefix of its dumps (``"portable"``).
    passes : sequence of Pass
        In the order they run.
    """

    name: str
    passes: Sequence[Pass]

    def run(self, text: str | Module, context: Any, *, label: str, prefix: str | None = None) -> str:
        """The module after every pass, in order, as text; with ``PYJLAD_DUMP_IR`` set, dumped before and after each.

        Parameters
        ----------
        text : str or Module
            The module the first pass gets (parsed or rendered as that pass needs).
        context : object
            Shared by the passes (each pipeline defines its own).
        label : str
            Names the dump directory: the function the module holds (``"pyjlad_f"``).
        prefix : str, optional
            Names the dumps of this run (default: the pipeline's name).
        """
        prefix = prefix or self.name
        module: str | Module = text
        _dump_lazily(label, f"{prefix}.input", module)
        for step in self.passes:
            module = step.run(_as_form(module, step.form), context)
            _dump_lazily(label, f"{prefix}.{step.name}", module)
        return _as_form(module, "text")

    def describe(self) -> str:
        """The pipeline as text: each pass's name, summary and what it changes (README shows this)."""
        width = max(len(p.name) for p in self.passes) + 2
        rows = [f"  {p.name:<{width}}{p.summary}  [changes: {p.changes}{'; LLVM IR text' if p.form == 'text' else ''}]"
                for p in self.passes]
        return "\n".join([f"{self.name}:", *rows])


def _as_form(module: str | Module, form: str) -> str | Module:
    """``module`` as text (``form="text"``) or parsed (``form="module"``), converting only when needed."""
    if form == "text":
        return module if isinstance(module, str) else module.render()
    return parse(module) if isinstance(module, str) else module


def _dump_lazily(label: str, stage: str, module: str | Module) -> None:
    """:func:`dump`, rendering a parsed module only when dumps are on."""
    if dump_directory() is not None:
        dump(label, stage, _as_form(module, "text"))


def dump_directory() -> Path | None:
    """Where dumps go: ``$PYJLAD_DUMP_IR`` as a path, or ``None`` when unset or empty."""
    value = config.dump_ir_directory()
    return Path(value).expanduser() if value else None


_counter_lock = threading.Lock()
_counters: dict[Path, itertools.count] = {}
_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def _next_number(directory: Path) -> int:
    with _counter_lock:
        return next(_counters.setdefault(directory, itertools.count(1)))


def dump(label: str, stage: str, module: str | bytes) -> Path | None:
    """Write ``module`` as ``$PYJLAD_DUMP_IR/<label>/<NN>-<stage>.ll``; nothing when the variable is unset.

    ``NN`` counts the dumps of ``label`` in this process, so files sort in the order the steps ran.
    Bitcode (Enzyme's input and output) is written as LLVM's text of it, read by llvmlite.

    Parameters
    ----------
    label : str
        The function (``"pyjlad_f"``); made safe as a file name.
    stage : str
        ``"<pipeline>.<pass>"`` or an engine step (``"enzyme.input"``, ``"enzyme.output"``).
    module : str or bytes
        LLVM IR text or bitcode.

    Returns
    -------
    pathlib.Path or None
        The file written, or ``None`` if dumps are off.

    Raises
    ------
    SettingError
        If the directory cannot be created or written (the user asked for dumps: never silently skipped).
    """
    root = dump_directory()
    if root is None:
        return None
    directory = root / _UNSAFE.sub("_", label)
    text = module_text(module)
    try:
        directory.mkdir(parents=True, exist_ok=True)
        path = directory / f"{_next_number(directory):02d}-{_UNSAFE.sub('_', stage)}.ll"
        path.write_text(text, encoding="utf-8")
    except OSError as exc:
        raise SettingError(f"{DUMP_VARIABLE}={str(root)!r}: cannot write the IR dumps there ({exc.strerror or exc}); "
                           "name a directory you can write, or unset it to write no dumps") from exc
    return path


#: The first bytes of an LLVM bitcode file (a wrapper-less one, as the toolchain writes).
_BITCODE_MAGIC = b"BC\xc0\xde"


def module_text(module: str | bytes) -> str:
    """LLVM's text of ``module``: IR text as it is, bitcode parsed by llvmlite, or IR text the toolchain returned
    as bytes."""
    if isinstance(module, str):
        return module
    if not module.startswith(_BITCODE_MAGIC):
        return module.decode("utf-8")
    import llvmlite.binding as llvm

    return str(llvm.parse_bitcode(module, context=llvm.create_context()))
