"""The child process that compiles a derivative's module to machine code (run by :mod:`pyjlad.engines.native`).

It does what Numba's JIT does with a module handed to a code library
(``CPUCodeLibrary.add_llvm_module`` then ``finalize``): the function passes on
each function, a link into an empty module with Numba's triple and data
layout, the cheap module pipeline and then the full one (each with Numba's
reference-count pruning pass), verification, and code generation with Numba's
target machine. The settings all come from the parent, read from its Numba
(:func:`pyjlad.engines.native.numba_settings`), so the machine code is the code
Numba would have produced; the parent loads it through Numba's object-code path.

An LLVM assertion or crash here kills this process only. The file imports
nothing but the standard library and llvmlite (importing Numba would cost a
second at every cold start), and is run by path, not as part of the pyjlad
package, for the same reason.

Protocol: the request on stdin is an 8-byte little-endian length, a JSON header
(the settings and the name of the one externally visible function), then the
module's bitcode. The reply on stdout is an 8-byte length, a JSON header (the
LLVM version and the sizes), the ELF object, then the bitcode Numba keeps to
link the library with others (every external definition ``linkonce_odr``).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import llvmlite.binding as llvm

#: Identifies the protocol; the parent refuses a reply from a different one.
PROTOCOL = "pyjlad-native-child/1"


def _read_request(stream: Any) -> tuple[dict[str, Any], bytes]:
    """The header and the bitcode of the request on ``stream``."""
    data = stream.read()
    if len(data) < 8:
        raise SystemExit(3)  # the parent went away without a request: nothing to do
    size = int.from_bytes(data[:8], "little")
    header = json.loads(data[8:8 + size])
    if header.get("protocol") != PROTOCOL:
        raise ValueError(f"request protocol {header.get('protocol')!r}, this child speaks {PROTOCOL!r}")
    return header, data[8 + size:]


def _pass_builder(tm: Any, passes: dict[str, Any]) -> Any:
    """An LLVM pass builder as ``numba.core.llvm_bindings.create_pass_builder`` makes it."""
    tuning = llvm.create_pipeline_tuning_options()
    tuning.speed_level = int(passes["opt"])
    tuning.slp_vectorization = bool(passes["slp_vectorize"])
    tuning.loop_vectorization = bool(passes["loop_vectorize"])
    return llvm.create_pass_builder(tm, tuning)


def _optimize_functions(module: Any, tm: Any, settings: dict[str, Any]) -> None:
    """``CPUCodeLibrary._optimize_functions``: the function pipeline over each function."""
    module.data_layout = settings["data_layout"]
    for function in module.functions:
        builder = _pass_builder(tm, settings["function_passes"])
        manager = builder.getFunctionPassManager()
        if settings["refprune"] is not None:
            manager.add_refprune_pass(settings["refprune"])
        manager.run(function, builder)


def _run_module_passes(module: Any, tm: Any, passes: dict[str, Any], refprune: int | None) -> None:
    """One of ``CPUCodeLibrary._optimize_final_module``'s two module pipelines."""
    builder = _pass_builder(tm, passes)
    manager = builder.getModulePassManager()
    if passes.get("rotate_combine_thread"):  # the cheap pipeline's extra passes (NUMBA_OPT != 0)
        manager.add_loop_rotate_pass()
        manager.add_instruction_combine_pass()
        manager.add_jump_threading_pass()
    if refprune is not None:
        manager.add_refprune_pass(refprune)
    manager.run(module, builder)


def _module_for_linking(module: Any) -> bytes:
    """``CPUCodeLibrary._get_module_for_linking``'s bitcode: external definitions made ``linkonce_odr``."""
    external = [f.name for f in module.functions if not f.is_declaration and f.linkage == llvm.Linkage.external]
    if external:
        module = module.clone()
        for name in external:
            module.get_function(name).linkage = "linkonce_odr"
    return module.as_bitcode()


def compile_module(settings: dict[str, Any], bitcode: bytes) -> tuple[bytes, bytes]:
    """The ELF object and the linking bitcode of ``bitcode``, compiled as Numba's JIT compiles a library."""
    target = llvm.Target.from_triple(settings["triple"])
    tm = target.create_target_machine(**settings["target_machine"])
    module = llvm.parse_bitcode(bitcode)
    module.verify()
    _optimize_functions(module, tm, settings)
    final = llvm.parse_assembly(
        f'; ModuleID = "{settings["module_name"]}"\n'
        f'target triple = "{settings["triple"]}"\n'
        f'target datalayout = "{settings["data_layout"]}"\n'
    )
    final.name = settings["module_name"]
    final.link_in(module)
    _run_module_passes(final, tm, settings["cheap_passes"], settings["refprune"])
    _run_module_passes(final, tm, settings["full_passes"], settings["refprune"])
    final.verify()
    return tm.emit_object(final), _module_for_linking(final)


def _reply(stream: Any, obj: bytes, shared: bytes) -> None:
    header = json.dumps({"protocol": PROTOCOL, "llvm": list(llvm.llvm_version_info),
                         "sizes": [len(obj), len(shared)]}).encode()
    stream.write(len(header).to_bytes(8, "little") + header + obj + shared)
    stream.flush()


def main() -> None:
    """Read one request from stdin, write the compiled module to stdout."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    header, bitcode = _read_request(sys.stdin.buffer)
    obj, shared = compile_module(header["settings"], bitcode)
    _reply(sys.stdout.buffer, obj, shared)


if __name__ == "__main__":
    main()
