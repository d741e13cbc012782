"""Which pointer parameters a function never writes, proved by LLVM on the portable module.

Whether an array argument is written decides how pyjlad passes it (:attr:`pyjlad.abi.ArrayArg.writes`): a
constant array the function may write gets a zeroed shadow (Enzyme would otherwise lose the derivative of
what it stores there and reads back), so Enzyme differentiates with respect to it; and a function that
returns nothing has its output taken to be the first float array it writes (:func:`pyjlad.product_args.written_output`).

Numba's optimized IR marks a data pointer ``readonly`` only where LLVM proved it, and Numba's LLVM sees
the BLAS helpers behind ``np.dot`` and ``@`` (``numba_xxgemv``, ``numba_xxgemm``, ``numba_xxdot``) as
external functions that may write anything. So ``w @ x[i]`` made ``w`` and ``x`` "written": for a constant
``x``, a zeroed shadow as large as ``x`` and a derivative with respect to it that nobody asked for (a
matrix-vector product per sample more in the reverse sweep, and a copy of ``w`` per sample kept for it);
for ``out[:] = a @ x``, a function returning nothing, ``a`` was taken for the output and its Jacobian was
silently all zeros.

The portable module defines those helpers (:mod:`pyjlad.runtime`, ``cblas.ll``) with CBLAS calls whose
inputs are declared ``nocapture readonly``. :func:`readonly_parameters` runs LLVM's own inference of
function attributes (the post-order ``function-attrs`` pass, LLVM 22 through llvmlite, in a context of its
own) over a copy of that module and reads what it proved for the entry's parameters. Numba's ``linkonce_odr``
definitions are made external in the copy first: LLVM infers nothing for a definition the linker might
replace, and an ODR definition is by definition the one that runs. What the inference proves is as sound as
the declarations it starts from; an undeclared external function is assumed to write through every pointer
it receives.

>>> text = '''
... declare void @use(ptr nocapture readonly)
... define linkonce_odr void @helper(ptr %p) {
...   call void @use(ptr %p)
...   ret void
... }
... define void @f(ptr %a, ptr %b) {
...   call void @helper(ptr %a)
...   store double 1.0, ptr %b
...   ret void
... }
... '''
>>> sorted(readonly_parameters(text, "f"))
['%a']
"""

from __future__ import annotations

import functools
import threading

import llvmlite.binding as llvm

from .log import get_logger

__all__ = ["readonly_parameters"]

_READ_ONLY = frozenset({b"readonly", b"readnone"})
#: Linkages whose definition is the one that runs (made external in the copy, so LLVM reasons about the body).
_ONE_DEFINITION = frozenset({llvm.Linkage.linkonce_odr, llvm.Linkage.weak_odr, llvm.Linkage.available_externally})

_log = get_logger(__name__)
#: One inference at a time: the target machine is shared, and exports may run in several threads.
_LOCK = threading.Lock()


@functools.cache
def _target_machine() -> llvm.TargetMachine:
    llvm.initialize_native_target()  # (done already where Numba was imported)
    return llvm.Target.from_default_triple().create_target_machine()


def readonly_parameters(text: str, entry: str) -> frozenset[str]:
    """The parameters of function ``entry`` in module ``text`` that LLVM proves ``readonly`` or ``readnone``.

    Parameters
    ----------
    text : str
        A module's LLVM IR (the portable module: LLVM 15 syntax, which LLVM 22 reads).
    entry : str
        The function's name, without ``@``.

    Returns
    -------
    frozenset of str
        The parameters' local names (``%arg.x.4``); empty if LLVM cannot read the module (the caller then
        keeps what Numba's own IR says).
    """
    with _LOCK:
        return _inferred(text, entry)


def _inferred(text: str, entry: str) -> frozenset[str]:
    try:
        module = llvm.parse_assembly(text, context=llvm.create_context())
        for function in module.functions:
            if not function.is_declaration and function.linkage in _ONE_DEFINITION:
                function.linkage = llvm.Linkage.external
        builder = llvm.create_pass_builder(_target_machine(), llvm.create_pipeline_tuning_options())
        manager = llvm.create_new_module_pass_manager()
        manager.add_post_order_function_attributes_pass()
        manager.run(module, builder)
        function = module.get_function(entry)
    except (RuntimeError, NameError) as exc:
        _log.debug("no inference of read-only parameters for %s: %s", entry, exc)
        return frozenset()
    return frozenset(f"%{arg.name}" for arg in function.arguments if _READ_ONLY & set(arg.attributes))
