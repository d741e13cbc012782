"""Machine code for a derivative's module, compiled in a child process so that LLVM cannot kill this one.

Numba's LLVM (llvmlite's, built with assertions) optimizes and compiles a
differentiated module in the process that calls it. An assertion or crash
there (an LLVM bug the module's shape reaches, a module no verifier rejects)
is a ``SIGABRT`` or ``SIGSEGV`` of the user's Python process, not an
exception. So pyjlad never hands such a module to the in-process LLVM: a fresh
interpreter (:mod:`pyjlad.engines.native_child`, started with
:mod:`subprocess`, never a fork of this possibly threaded process) runs Numba's
own pipeline with Numba's own settings (:func:`numba_settings`) over it and
returns the ELF object, which the parent loads through Numba's object-code
path, the one its disk cache of machine code uses. A crash in the child is an
:class:`~pyjlad.errors.EnzymeError` with the signal and LLVM's output.

The child is started before Enzyme runs (:func:`start`) so that its start (the
interpreter and llvmlite, about 0.2 s) overlaps with ``opt``.

:func:`drop_invariant_groups` keeps Enzyme's output away from the one LLVM 22
defect known to be reached by it (see there).
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import llvmlite.binding as llvm

from ..errors import EnzymeError
from ..ir.edit import drop_attributes
from ..ir.module import parse
from ..ir.rewrite import drop_attachment
from . import native_child

__all__ = ["MODULE_FORM", "NativeCompiler", "drop_invariant_groups", "numba_settings", "start"]

_CHILD = Path(native_child.__file__).resolve()
#: Runs the child script by path with this process's module search path, and nothing from the
#: environment or the working directory that could shadow llvmlite (``-I``), without ``site`` (``-S``).
_BOOT = ("import sys, json, runpy; sys.path[:] = json.loads(sys.argv[1]); "
         "runpy.run_path(sys.argv[2], run_name='__main__')")
_TAIL_LINES = 12


#: Identifies what :func:`drop_invariant_groups` does (part of the cache keys of the modules it made).
MODULE_FORM = "no-invariant-group/no-host-attributes/2"
#: The function attributes ``opt -mcpu=native`` writes (:data:`pyjlad.engines.differentiate.HOST_TARGET`): LLVM 15's
#: names for this CPU's features, some of which Numba's newer LLVM no longer knows and warns about on the user's
#: stderr (``'-avx512pf' is not a recognized feature for this target``) wherever it compiles the derivative into
#: a caller (``vmap``, derivatives called from ``@njit`` code). Without them Numba's target machine decides,
#: for the same host CPU.
_HOST_ATTRIBUTES = frozenset({'"target-cpu"', '"target-features"'})


def drop_invariant_groups(bitcode: bytes) -> bytes:
    """``bitcode`` without ``!invariant.group`` metadata and without the host CPU's attributes
    (:data:`_HOST_ATTRIBUTES`; LLVM 22 bitcode); unchanged if it has neither.

    Enzyme marks the loads and stores of its cache (the tape) ``!invariant.group``.
    LLVM 22's GVN, asking memory dependence analysis about such a load
    (``MemoryDependenceResults::getInvariantGroupPointerDependency``), walks the
    use list of the load's pointer after stripping casts; it skips globals but
    not constants, and since LLVM 21 a ``ConstantData`` (``null``, ``undef``,
    ``poison``) has no use list: ``Value.h: Assertion `hasUseList()' failed``
    (llvmlite's LLVM has assertions on; a build without them walks an empty
    list). Enzyme's cache pointers start as ``null`` in an ``alloca``, so once
    inlining and jump threading have folded a path on which the cache was not
    allocated, GVN meets ``load double, ptr null, !invariant.group``: valid IR
    (the verifier accepts it; the path never runs), an LLVM bug. The metadata
    is only a hint (removing it is always correct), and ``opt`` has already
    optimized with it after Enzyme ran.

    Bytes LLVM cannot read (a truncated ``opt`` output) are returned as they are:
    the cache's check of ``opt``'s output reports them.
    """
    context = llvm.create_context()
    try:
        text = str(llvm.parse_bitcode(bitcode, context=context))
    except RuntimeError:
        return bitcode
    lines = text.split("\n")
    stripped_lines = [drop_attachment(line, "!invariant.group") for line in lines]
    if any(key in text for key in _HOST_ATTRIBUTES):
        stripped_lines = drop_attributes(parse("\n".join(stripped_lines), strict=False),
                                         _HOST_ATTRIBUTES).render().split("\n")
    if stripped_lines == lines:
        return bitcode
    stripped = "\n".join(stripped_lines)
    return llvm.parse_assembly(stripped, context=context).as_bitcode()


def numba_settings(name: str) -> dict[str, Any]:
    """What Numba's JIT would use to compile a library called ``name`` in this process.

    Read from Numba's own code generator and configuration: the target
    machine's options (host CPU and features, relocation and code model for
    the JIT), the triple and data layout, and the optimization levels of the
    function, cheap and full pipelines. Uses Numba internals
    (``_customize_tm_options``, ``_data_layout``, ``_opt_level``,
    ``_loopvect``); ``tests/test_native.py`` checks that the child's machine
    code equals the code Numba compiles in-process, so a Numba that changes
    them fails there.
    """
    from numba.core import config
    from numba.core.codegen import _parse_refprune_flags
    from numba.core.registry import cpu_target

    codegen = cpu_target.target_context.codegen()
    tm_options: dict[str, Any] = {"opt": int(config.OPT)}
    codegen._customize_tm_options(tm_options)
    full = {"opt": int(config.OPT), "loop_vectorize": bool(config.LOOP_VECTORIZE),
            "slp_vectorize": bool(config.SLP_VECTORIZE)}
    return {
        "target_machine": tm_options,
        "triple": llvm.get_process_triple(),
        "data_layout": codegen._data_layout,
        "module_name": name.encode("utf8").decode("latin1"),  # cgutils.normalize_ir_text
        "function_passes": full,
        "cheap_passes": {"opt": int(codegen._opt_level), "loop_vectorize": bool(codegen._loopvect),
                         "slp_vectorize": False, "rotate_combine_thread": int(config.OPT) != 0},
        "full_passes": full,
        # Numba's legacy Python-level pruner (NUMBA_LLVM_REFPRUNE_PASS=0) is not run: an optimization only.
        "refprune": int(_parse_refprune_flags()) if config.LLVM_REFPRUNE_PASS else None,
    }


def _timeout_s() -> float:
    """``PYJLAD_OPT_TIMEOUT``, which bounds the child's compile as it bounds Enzyme's run."""
    from ..config import opt_timeout_s

    return opt_timeout_s()


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _tail(stderr: str) -> str:
    lines = [line.rstrip() for line in stderr.splitlines() if line.strip()]
    return "\n".join(line[:300] for line in lines[-_TAIL_LINES:])


class NativeCompiler:
    """One child process that compiles one module (see :func:`start`); use as a context manager."""

    def __init__(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-I", "-S", "-c", _BOOT, json.dumps([str(p) for p in sys.path]), str(_CHILD)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, close_fds=True,
        )

    def __enter__(self) -> NativeCompiler:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """End the child if it is still waiting (the build failed before there was a module)."""
        proc = self._proc
        if proc.returncode is None:
            try:
                proc.communicate(timeout=5)  # closes stdin: a waiting child reads an empty request and exits
            except (subprocess.TimeoutExpired, OSError, ValueError):
                proc.kill()
                proc.wait()

    def compile(self, bitcode: bytes, name: str, what: str) -> tuple[bytes, bytes]:
        """The ELF object and linking bitcode of ``bitcode`` (one function, ``name``, external).

        ``what`` names the derivative in the user's terms (for the message).

        Raises
        ------
        EnzymeError
            If LLVM crashes, asserts or fails on the module, or takes longer
            than ``PYJLAD_OPT_TIMEOUT``; :attr:`~pyjlad.errors.EnzymeError.diagnostics`
            holds the child's output.
        """
        header = json.dumps({"protocol": native_child.PROTOCOL, "name": name,
                             "settings": numba_settings(name)}).encode()
        request = len(header).to_bytes(8, "little") + header + bitcode
        timeout = _timeout_s()
        try:
            out, err = self._proc.communicate(request, timeout=timeout)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            _, err = self._proc.communicate()
            raise EnzymeError(
                f"LLVM did not finish compiling {what} to machine code within {timeout:.0f} s "
                "(raise PYJLAD_OPT_TIMEOUT to wait longer)",
                diagnostics=err.decode(errors="replace"),
            ) from None
        stderr = err.decode(errors="replace")
        code = self._proc.returncode
        if code != 0:
            raise EnzymeError(_describe_failure(code, stderr, what), diagnostics=stderr)
        return _parse_reply(out, stderr, what)


def _describe_failure(code: int, stderr: str, what: str) -> str:
    how = (f"crashed ({_signal_name(-code)})" if code < 0 else f"failed (exit status {code})")
    tail = _tail(stderr)
    return (f"LLVM {how} while compiling {what} to machine code; the derivative was computed by Enzyme but "
            "cannot be run (an LLVM defect, please report it with exc.diagnostics)"
            + (f":\n{tail}" if tail else ""))


def _parse_reply(out: bytes, stderr: str, what: str) -> tuple[bytes, bytes]:
    """The object and linking bitcode of the child's reply (an EnzymeError if it is malformed)."""
    try:
        size = int.from_bytes(out[:8], "little")
        header = json.loads(out[8:8 + size])
        n_obj, n_shared = header["sizes"]
        ok = (header["protocol"] == native_child.PROTOCOL and tuple(header["llvm"]) == llvm.llvm_version_info
              and len(out) == 8 + size + n_obj + n_shared)
    except (ValueError, KeyError, TypeError):
        ok = False
    if not ok:
        raise EnzymeError(
            f"the process compiling {what} to machine code gave an unreadable reply ({len(out)} bytes; is "
            f"{sys.executable} the interpreter this process runs, with the same llvmlite?)",
            diagnostics=stderr,
        )
    body = out[8 + size:]
    return body[:n_obj], body[n_obj:]


def start() -> NativeCompiler:
    """A child process ready to compile one module (started now, so that its start overlaps other work).

    Raises
    ------
    EnzymeError
        If the interpreter cannot be started.
    """
    if not sys.executable:
        raise EnzymeError("pyjlad compiles derivatives to machine code in a child Python process, and this "
                          "interpreter does not know its own executable (sys.executable is empty)")
    try:
        return NativeCompiler()
    except OSError as exc:
        raise EnzymeError(f"cannot start {sys.executable} to compile a derivative to machine code: {exc}",
                          diagnostics=str(exc)) from None
