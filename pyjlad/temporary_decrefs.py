"""A temporary's last ``NRT_decref`` written out where it is called, so that Enzyme reads the temporary again
instead of caching it.

Enzyme caches a value its reverse sweep needs when anything after the load may overwrite the memory it came
from. ``out = np.zeros(n)``, a loop that fills it, then ``s += out[i] * out[i]``: the ``NRT_decref`` of
``out`` after the sum was such a thing to LLVM's alias analysis, an opaque call that may run a destructor,
and inside it a ``release`` decrement and a ``fence``, which order (so "may write") all memory. Enzyme
copied ``out`` into its tape, 8 MB per gradient of a one-million-cell stencil, a serial copy on the
critical path of the parallel derivative.

:func:`inline_temporary_decrefs` writes each ``NRT_decref`` of a temporary (a block the function allocated
itself, :mod:`pyjlad.memory_scopes`) out as what it does there, in blocks of its own::

    %pyjlad.decref.0.null = icmp eq ptr %mi, null
    br i1 %pyjlad.decref.0.null, label %pyjlad.decref.0.done, label %pyjlad.decref.0.dec
  pyjlad.decref.0.dec:
    %pyjlad.decref.0.old = atomicrmw sub ptr %mi, i64 1 monotonic, align 8, !alias.scope <reference counts>
    ...  ; the count reached zero: call void @free(ptr %mi)

Enzyme does not count a ``free`` as a write (it moves it to the reverse sweep while the block is needed
there), and the decrement is tagged as a reference count, which a temporary's data accesses are not
(``!noalias`` for it). LLVM's own passes still see the ``free`` as what it is: the block's end.

What the call did that this leaves out, and why that is sound here:

* the destructor: pyjlad's allocators (:data:`pyjlad.memory_scopes.ALLOCATIONS`) set none, and no code
  writes a header's ``dtor`` or ``external_allocator`` field after them;
* the decrement's ordering (``release``, and ``fence acquire`` before the ``free``): every reference to a
  temporary is held by the function's own thread, or by the threads of a parallel loop it forks, which
  are joined before the function goes on; the join orders their accesses before the decrement.

A call in an entry block without a label (no name to branch back to) stays a call; an ``invoke`` (a
terminator, which Numba does not emit) stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from .ir.cfg import split_blocks
from .ir.instructions import parse_instruction

__all__ = ["DECREF", "inline_temporary_decrefs"]

#: pyjlad's reference-count decrement (:mod:`pyjlad.runtime`'s ``nrt.ll``).
DECREF = "@NRT_decref"
_PREFIX = "pyjlad.decref."


def _written_out(header: str, name: str, counts: str) -> list[str]:
    """The lines that replace ``call void @NRT_decref(ptr <header>)``; the last opens block ``<name>.done``."""
    return [f"  %{name}.null = icmp eq ptr {header}, null",
            f"  br i1 %{name}.null, label %{name}.done, label %{name}.dec",
            f"{name}.dec:",
            f"  %{name}.old = atomicrmw sub ptr {header}, i64 1 monotonic, align 8, !alias.scope {counts}",
            f"  %{name}.last = icmp eq i64 %{name}.old, 1",
            f"  br i1 %{name}.last, label %{name}.free, label %{name}.done",
            f"{name}.free:",
            f"  call void @free(ptr {header})",
            f"  br label %{name}.done",
            f"{name}.done:"]


def inline_temporary_decrefs(body: list[str], is_temporary: Callable[[str], bool], counts: str) -> list[str]:
    """``body`` with each ``NRT_decref`` of a temporary written out (see the module's docstring).

    Parameters
    ----------
    body : list of str
        A function's body lines (block labels included).
    is_temporary : callable
        Whether a ``ptr`` value (``%mi``) is the header of a block the function allocated.
    counts : str
        The ``!alias.scope`` list (``!4``) the decrement gets.

    Returns
    -------
    list of str
        The new body (``body`` itself when nothing was written out).

    Examples
    --------
    >>> body = ["entry:", "  %mi = call ptr @alloc()", "  call void @NRT_decref(ptr %mi)", "  br label %next",
    ...         "next:", "  %p = phi ptr [ %mi, %entry ]", "  ret void"]
    >>> for line in inline_temporary_decrefs(body, lambda v: v == "%mi", "!4"): print(line)
    entry:
      %mi = call ptr @alloc()
      %pyjlad.decref.0.null = icmp eq ptr %mi, null
      br i1 %pyjlad.decref.0.null, label %pyjlad.decref.0.done, label %pyjlad.decref.0.dec
    pyjlad.decref.0.dec:
      %pyjlad.decref.0.old = atomicrmw sub ptr %mi, i64 1 monotonic, align 8, !alias.scope !4
      %pyjlad.decref.0.last = icmp eq i64 %pyjlad.decref.0.old, 1
      br i1 %pyjlad.decref.0.last, label %pyjlad.decref.0.free, label %pyjlad.decref.0.done
    pyjlad.decref.0.free:
      call void @free(ptr %mi)
      br label %pyjlad.decref.0.done
    pyjlad.decref.0.done:
      br label %next
    next:
      %p = phi ptr [ %mi, %pyjlad.decref.0.done ]
      ret void
    """
    def expand(line: str, count: int) -> list[str] | None:
        instruction = parse_instruction(line) if DECREF in line else None
        call = instruction.call() if instruction is not None and instruction.opcode == "call" else None
        if call is None or call.callee != DECREF or len(call.values) != 1 or not is_temporary(call.values[0]):
            return None
        return _written_out(call.values[0], f"{_PREFIX}{count}", counts)

    return split_blocks(body, expand)[0]
