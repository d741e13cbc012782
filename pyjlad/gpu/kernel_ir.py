"""The generated LLVM IR around Enzyme's reverse sweep: one sample's body, the GPU kernel, the CPU loop.

The *body* ``void body(i64 i, params...)`` does everything for sample ``i``:
it reads the sample's arguments where they lie (mapped arguments at ``i``
times their batch stride, shared ones whole), builds Numba's array
parameters for them, zeroes the sample's gradient rows (the shadows Enzyme
accumulates into), calls the driver (:func:`pyjlad.engines.driver.ad_driver`:
value, adjoints of float scalars, array gradients, Numba's status), and
stores the status in ``status[i]``; a non-zero status also adds one to the
batch's failure count (an atomic add), so that the caller reads one number,
not ``n`` statuses, to know whether any sample failed.

Two loops call the same body: the *kernel*, one GPU thread per sample with a
grid-stride loop (``i = blockIdx.x * blockDim.x + threadIdx.x``, stepping by
``gridDim.x * blockDim.x``), and the *host loop*, ``for i in range(n)``, which
compiles the same body for the CPU (the executable check of the generated code
on a machine without a GPU).

Parameters of both loops, in order: ``i64 n``; per argument, its value (a
shared number) or a pointer to its first byte; per differentiated argument, a
pointer to its gradient rows (``n`` C-contiguous samples); the values
(``n`` results); the statuses (``n`` ``int32``); the failure count (one
``int32``, zero before the call).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from ..abi import ArrayArg, FunctionABI
from ..engines.driver import RELEASE, ZEROED, Driver
from ..errors import UnsupportedFunctionError
from ..targets.nvptx import NVPTX_DATALAYOUT, NVPTX_TRIPLE
from .layout import Slot

__all__ = ["KernelNames", "kernel_names", "body_module", "kernel_module", "host_loop_module", "loop_params"]

#: Element types in memory (a bool is one byte).
_MEMORY_TYPES = {"float64": "double", "float32": "float", "int64": "i64", "int32": "i32", "bool": "i8"}
_ZERO = {"double": "0.000000e+00", "float": "0.000000e+00"}
_ONE = {"double": "1.000000e+00", "float": "1.000000e+00"}


@dataclass(frozen=True)
class KernelNames:
    """The symbols of one generated kernel: the body, the GPU kernel, the CPU loop."""

    body: str
    kernel: str
    host: str


def kernel_names(driver: Driver, slots: tuple[Slot, ...], wrt: tuple[int, ...]) -> KernelNames:
    """Names unique to the driver and the layout (a kernel is generated per layout)."""
    tag = hashlib.sha256(repr((driver.symbol, slots, wrt)).encode()).hexdigest()[:12]
    return KernelNames(f"pyjlad_sample_{tag}", f"pyjlad_batched_{tag}", f"pyjlad_batched_cpu_{tag}")


def _value_type(slot: Slot, abi_type: str) -> str:
    """The LLVM type a shared number is passed as (a bool as a byte)."""
    return "i8" if abi_type == "i1" else abi_type


def loop_params(slots: tuple[Slot, ...], abi: FunctionABI, wrt: tuple[int, ...]) -> list[tuple[str, str]]:
    """``(llvm type, name)`` of every parameter after ``n``, in order (see the module's docstring)."""
    params = []
    for slot in slots:
        arg = abi.args[slot.index]
        if slot.by_value:
            params.append((_value_type(slot, arg.llvm_type), f"%a{slot.index}"))  # type: ignore[union-attr]
        else:
            params.append(("ptr", f"%a{slot.index}"))
    params += [("ptr", f"%g{k}") for k in wrt]
    params += [("ptr", "%values"), ("ptr", "%status"), ("ptr", "%failures")]
    return params


def _typed(params: list[tuple[str, str]]) -> str:
    return ", ".join(f"{ty} {name}" for ty, name in params)


def _offset(var: str, index: str, step: int) -> list[str]:
    return [f"  {var} = mul nsw i64 {index}, {step}"]


def _scalar_lines(slot: Slot, abi_type: str) -> tuple[list[str], str]:
    """Lines giving one sample's number for ``slot``, and the value's name."""
    k = slot.index
    if slot.by_value:
        if abi_type == "i1":
            return [f"  %v{k} = trunc i8 %a{k} to i1"], f"%v{k}"
        return [], f"%a{k}"
    memory = _MEMORY_TYPES[slot.dtype]
    lines = [*_offset(f"%o{k}", "%i", slot.batch_stride),
             f"  %p{k} = getelementptr inbounds i8, ptr %a{k}, i64 %o{k}",
             f"  %m{k} = load {memory}, ptr %p{k}, align {slot.itemsize}"]
    if memory == abi_type:
        return lines, f"%m{k}"
    if memory == "i8" and abi_type == "i1":
        return [*lines, f"  %v{k} = icmp ne i8 %m{k}, 0"], f"%v{k}"
    raise UnsupportedFunctionError(f"argument {k}: a {slot.dtype} sample does not fit the function's "
                                   f"parameter type {abi_type}")


def _array_lines(slot: Slot, arg: ArrayArg) -> tuple[list[str], dict[str, str]]:
    """Lines giving the data pointer of one sample of ``slot``, and Numba's array parameters by role."""
    k = slot.index
    if arg.ndim != len(slot.sample_shape):
        raise UnsupportedFunctionError(f"argument {k}: the function takes a {arg.ndim}-d array, the samples "
                                       f"are {len(slot.sample_shape)}-d")
    if slot.mapped:
        lines = [*_offset(f"%o{k}", "%i", slot.batch_stride),
                 f"  %d{k} = getelementptr inbounds i8, ptr %a{k}, i64 %o{k}"]
        data = f"%d{k}"
    else:
        lines, data = [], f"%a{k}"
    roles = {"meminfo": "null", "parent": "null", "nitems": str(slot.nitems), "itemsize": str(slot.itemsize),
             "data": data}
    roles.update({f"shape{j}": str(extent) for j, extent in enumerate(slot.sample_shape)})
    roles.update({f"stride{j}": str(stride) for j, stride in enumerate(slot.sample_strides)})
    return lines, roles


def _gradient_lines(slot: Slot) -> tuple[list[str], str]:
    """Lines giving sample ``i``'s gradient row of ``slot`` (zeroed first for an array), and its pointer."""
    k = slot.index
    size = slot.nitems * slot.itemsize
    lines = [*_offset(f"%go{k}", "%i", size), f"  %s{k} = getelementptr inbounds i8, ptr %g{k}, i64 %go{k}"]
    if slot.is_array:
        lines.append(f"  call void @llvm.memset.p0.i64(ptr align {slot.itemsize} %s{k}, i8 0, i64 {size}, i1 false)")
    return lines, f"%s{k}"


def body_module(abi: FunctionABI, driver: Driver, slots: tuple[Slot, ...], wrt: tuple[int, ...],
                names: KernelNames) -> list[str]:
    """The lines of the body function and its declarations (no target lines)."""
    result = abi.result.llvm_type
    lines: list[str] = []
    args: list[str] = []
    gradients: dict[int, str] = {}
    for slot in slots:
        arg = abi.args[slot.index]
        if slot.is_array:
            if not isinstance(arg, ArrayArg):
                raise UnsupportedFunctionError(f"argument {slot.index} is an array but the function takes a number")
            more, roles = _array_lines(slot, arg)
            args += [f"{ty} {roles[role]}" for index, role, ty in abi.params() if index == slot.index]
        else:
            more, value = _scalar_lines(slot, arg.llvm_type)
            args.append(f"{arg.llvm_type} {value}")
        lines += more
        if slot.index in wrt:
            more, gradients[slot.index] = _gradient_lines(slot)
            lines += more
    adjoints = [f"ptr {gradients[k]}" for k in driver.active_scalars]
    shadows = [f"ptr {gradients[k]}" for k in driver.shadow_args]
    call = ", ".join(["ptr %vo", "ptr %dret", "ptr %excinfo", *adjoints, *args, *shadows])
    declared = ", ".join(["ptr", "ptr", "ptr", *["ptr"] * len(adjoints), *abi.param_types, *["ptr"] * len(shadows)])
    size = 8 if result == "double" else 4
    return [
        f"declare i32 @{driver.symbol}({declared})",
        "declare void @llvm.memset.p0.i64(ptr nocapture writeonly, i8, i64, i1 immarg)",
        "",
        f"define internal void @{names.body}(i64 %i, {_typed(loop_params(slots, abi, wrt))}) alwaysinline {{",
        "entry:",
        "  %excinfo = alloca ptr, align 8",
        f"  %dret = alloca {result}, align 8",
        "  store ptr null, ptr %excinfo, align 8",
        f"  store {result} {_ONE[result]}, ptr %dret, align 8",
        *lines,
        *_offset("%vofs", "%i", size),
        "  %vo = getelementptr inbounds i8, ptr %values, i64 %vofs",
        f"  store {result} {_ZERO[result]}, ptr %vo, align {size}",
        f"  %st = call i32 @{driver.symbol}({call})",
        "  %stp = getelementptr inbounds i32, ptr %status, i64 %i",
        "  store i32 %st, ptr %stp, align 4",
        "  %failed = icmp ne i32 %st, 0",
        "  br i1 %failed, label %count, label %done",
        "count:",
        "  %ignored = atomicrmw add ptr %failures, i32 1 monotonic, align 4",
        "  br label %done",
        "done:",
        "  ret void",
        "}",
        "",
    ]


def _loop(name: str, body: str, params: list[tuple[str, str]], start: list[str], attrs: str = "") -> list[str]:
    """``define void @name(i64 %n, params)``: ``for (i = %start; i < n; i += %step) body(i, params)``."""
    return [
        f"define void @{name}(i64 %n, {_typed(params)}){attrs} {{",
        "entry:",
        *start,
        "  %first = icmp slt i64 %start, %n",
        "  br i1 %first, label %loop, label %done",
        "loop:",
        "  %i = phi i64 [ %start, %entry ], [ %next, %loop ]",
        f"  call void @{body}(i64 %i, {_typed(params)})",
        "  %next = add nsw i64 %i, %step",
        "  %more = icmp slt i64 %next, %n",
        "  br i1 %more, label %loop, label %done",
        "done:",
        "  ret void",
        "}",
        "",
    ]


_SREGS = ("tid.x", "ntid.x", "ctaid.x", "nctaid.x")


def kernel_module(abi: FunctionABI, driver: Driver, slots: tuple[Slot, ...], wrt: tuple[int, ...],
                  names: KernelNames) -> str:
    """The NVPTX module of the kernel (grid-stride loop) and the body; the driver is declared."""
    start = [f"  %{r.replace('.', '_')} = call i32 @llvm.nvvm.read.ptx.sreg.{r}()" for r in _SREGS]
    start += [f"  %{r.replace('.', '_')}.64 = zext i32 %{r.replace('.', '_')} to i64" for r in _SREGS]
    start += ["  %block = mul nuw nsw i64 %ctaid_x.64, %ntid_x.64",
              "  %start = add nuw nsw i64 %block, %tid_x.64",
              "  %step = mul nuw nsw i64 %ntid_x.64, %nctaid_x.64"]
    return "\n".join([
        f'target datalayout = "{NVPTX_DATALAYOUT}"',
        f'target triple = "{NVPTX_TRIPLE}"',
        "",
        *[f"declare i32 @llvm.nvvm.read.ptx.sreg.{r}() readnone nounwind" for r in _SREGS],
        *body_module(abi, driver, slots, wrt, names),
        *_loop(names.kernel, names.body, loop_params(slots, abi, wrt), start),
        "!nvvm.annotations = !{!0}",
        f'!0 = !{{ptr @{names.kernel}, !"kernel", i32 1}}',
        "",
    ])


def host_loop_module(abi: FunctionABI, driver: Driver, slots: tuple[Slot, ...], wrt: tuple[int, ...],
                     names: KernelNames, target_lines: list[str]) -> str:
    """The CPU module of the same body in a plain loop over the samples, with the host's ``target_lines``."""
    start = ["  %start = add i64 0, 0", "  %step = add i64 1, 0"]
    return "\n".join([
        *target_lines,
        "",
        *body_module(abi, driver, slots, wrt, names),
        *_loop(names.host, names.body, loop_params(slots, abi, wrt), start),
    ])


#: Device versions of the driver's zeroed-shadow allocator (CUDA's device ``malloc``/``free``), linked
#: into a kernel whose driver allocates a zeroed shadow for a constant array Numba may alias.
DEVICE_ALLOCATOR = "\n".join([
    f'target datalayout = "{NVPTX_DATALAYOUT}"',
    f'target triple = "{NVPTX_TRIPLE}"',
    "declare ptr @malloc(i64)",
    "declare void @free(ptr)",
    "declare void @llvm.memset.p0.i64(ptr nocapture writeonly, i8, i64, i1 immarg)",
    f"define ptr @{ZEROED}(i64 %n, i64 %size) {{",
    "entry:",
    "  %bytes = mul i64 %n, %size",
    "  %p = call ptr @malloc(i64 %bytes)",
    "  %null = icmp eq ptr %p, null",
    "  br i1 %null, label %done, label %zero",
    "zero:",
    "  call void @llvm.memset.p0.i64(ptr %p, i8 0, i64 %bytes, i1 false)",
    "  br label %done",
    "done:",
    "  ret ptr %p",
    "}",
    f"define void @{RELEASE}(ptr %p) {{",
    "entry:",
    "  call void @free(ptr %p)",
    "  ret void",
    "}",
    "",
])
