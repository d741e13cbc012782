"""A temporary's last ``NRT_decref`` written out where it is called, so that Enzyme reads the temporary again
instead of caching it.

Enzyme caches a value its reverse sweep needs when anything after the load may overwrite the memory it came
from. ``out = np.zeros(n)``, a loop that fills it, then ``s += out[i] * out[i]``: the ``NRT_decref`` of
``out`` after the sum was such a thing to LLVM's alias analysis, an opaque call that may run a destructor,
and inside it a ``release`` decrement and a ``fence``, which order (so "may write") all memory. Enzyme
copied ``out`` into its tape, 8 MB per gradient of a one-million-cell stencil, a serial copy on the
critical path of the parallel derivative.

:func:`inline_temporary_decrefs` writes each ``NRT_decref`` of a temporary (a block the function allocated
itself, :mod:`pyjlad.memory_scopes`) out as what it does there, without a branch::

    %pyjlad.decref.0.null = icmp eq ptr %mi, null
    %pyjlad.decref.0.count = select i1 %pyjlad.decref.0.null, ptr %pyjlad.decref.sink, ptr %mi
    %pyjlad.decref.0.old = atomicrmw sub ptr %pyjlad.decref.0.count, i64 1 monotonic, align 8, !alias.scope <counts>
    %pyjlad.decref.0.last = icmp eq i64 %pyjlad.decref.0.old, 1
    %pyjlad.decref.0.freed = select i1 %pyjlad.decref.0.last, ptr %mi, ptr null
    call void @free(ptr %pyjlad.decref.0.freed)

A null header decrements ``%pyjlad.decref.sink``, a count of the function's own on its stack (set to zero in the
entry block), and frees ``null`` (nothing) whatever that count holds; a count that did not reach zero frees
``null`` too. No branch, because Enzyme v0.0.289 looks for the way back to a loop's header from each block that
leaves the loop by trying every path breadth first, without remembering the blocks it has seen
(``CacheUtility::getContext``): each decrement written with branches doubled the paths after it, and a loop
step with two dozen temporaries (a Kalman filter's 2x2 products and inverse) made Enzyme run out of memory
(``tests/test_temporary_decrefs.py``, ``test_a_kalman_filter_step_with_many_temporaries``).

Enzyme does not count a ``free`` as a write (it moves it to the reverse sweep while the block is needed
there), and the decrement is tagged as a reference count, which a temporary's data accesses are not
(``!noalias`` for it). LLVM's own passes still see the ``free`` as what it is: the block's end.

What the call did that this leaves out, and why that is sound here:

* the destructor: pyjlad's allocators (:data:`pyjlad.memory_scopes.ALLOCATIONS`) set none, and no code
  writes a header's ``dtor`` or ``external_allocator`` field after them;
* the decrement's ordering (``release``, and ``fence acquire`` before the ``free``): every reference to a
  temporary is held by the function's own thread, or by the threads of a parallel loop it forks, which
  are joined before the function goes on; the join orders their accesses before the decrement.

An ``invoke`` (a terminator, which Numba does not emit) stays as it is.
"""

from __future__ import annotations

from collections.abc import Callable

from .ir.cfg import block_label
from .ir.instructions import parse_instruction

__all__ = ["DECREF", "inline_temporary_decrefs"]

#: pyjlad's reference-count decrement (:mod:`pyjlad.runtime`'s ``nrt.ll``).
DECREF = "@NRT_decref"
_PREFIX = "pyjlad.decref."
#: The count a null header decrements instead (see the module's docstring).
_SINK = f"%{_PREFIX}sink"


def _written_out(header: str, name: str, counts: str) -> list[str]:
    """The lines that replace ``call void @NRT_decref(ptr <header>)``."""
    return [f"  %{name}.null = icmp eq ptr {header}, null",
            f"  %{name}.count = select i1 %{name}.null, ptr {_SINK}, ptr {header}",
            f"  %{name}.old = atomicrmw sub ptr %{name}.count, i64 1 monotonic, align 8, !alias.scope {counts}",
            f"  %{name}.last = icmp eq i64 %{name}.old, 1",
            f"  %{name}.freed = select i1 %{name}.last, ptr {header}, ptr null",
            f"  call void @free(ptr %{name}.freed)"]


def _with_sink(body: list[str]) -> list[str]:
    """``body`` with the sink count allocated and set to zero at the top of its entry block."""
    at = 1 if body and block_label(body[0]) is not None else 0
    return [*body[:at], f"  {_SINK} = alloca i64, align 8", f"  store i64 0, ptr {_SINK}, align 8", *body[at:]]


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
      %pyjlad.decref.sink = alloca i64, align 8
      store i64 0, ptr %pyjlad.decref.sink, align 8
      %mi = call ptr @alloc()
      %pyjlad.decref.0.null = icmp eq ptr %mi, null
      %pyjlad.decref.0.count = select i1 %pyjlad.decref.0.null, ptr %pyjlad.decref.sink, ptr %mi
      %pyjlad.decref.0.old = atomicrmw sub ptr %pyjlad.decref.0.count, i64 1 monotonic, align 8, !alias.scope !4
      %pyjlad.decref.0.last = icmp eq i64 %pyjlad.decref.0.old, 1
      %pyjlad.decref.0.freed = select i1 %pyjlad.decref.0.last, ptr %mi, ptr null
      call void @free(ptr %pyjlad.decref.0.freed)
      br label %next
    next:
      %p = phi ptr [ %mi, %entry ]
      ret void
    """
    out: list[str] = []
    count = 0
    for line in body:
        instruction = parse_instruction(line) if DECREF in line and block_label(line) is None else None
        call = instruction.call() if instruction is not None and instruction.opcode == "call" else None
        if call is None or call.callee != DECREF or len(call.values) != 1 or not is_temporary(call.values[0]):
            out.append(line)
            continue
        out += _written_out(call.values[0], f"{_PREFIX}{count}", counts)
        count += 1
    return _with_sink(out) if count else body
