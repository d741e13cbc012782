"""Per-sample gradients of a batch: ``pyjlad.gpu.vmap_grad`` and ``pyjlad.gpu.vmap_value_and_grad``.

``vmap_grad(f, wrt, in_axes)(*args)`` equals
``pyjlad.vmap(pyjlad.grad(f, wrt), in_axes)(*args)``: for every sample ``i`` of the
mapped arguments, the gradient of ``f`` at that sample, stacked along a new
leading axis (a shared argument named in ``wrt`` gets one gradient per sample
too). It runs as a generated CUDA kernel, one thread per sample
(:mod:`pyjlad.gpu.kernel_ir`, :mod:`pyjlad.gpu.ptx`, :mod:`pyjlad.gpu.launch`).
The same generated body also runs on the CPU (:meth:`BatchedGradient.on_cpu`),
which is how it is checked where there is no GPU.

Arguments: NumPy arrays (copied to the device, results come back as NumPy
arrays) or arrays with ``__cuda_array_interface__`` (read where they lie;
results stay on the device as :class:`pyjlad.gpu.DeviceArray`); numbers for
shared scalars. A sample that raises (Numba's status) makes the call raise the
function's own exception for the first failing sample, with a note counting
the failures of the batch.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..batching import InAxes, _axes_for, _normalize_in_axes
from ..engines.base import reraise_from_function
from ..errors import ArgumentError, ArgumentTypeError, DifferentiatedFunctionError, UnsupportedFunctionError
from ..transforms import Wrt, _normalize_wrt
from .kernel_ir import KernelNames, kernel_names
from .layout import ArgView, Slot, batch_size, is_device_array, sample_argtypes, slots_for, view_of
from .sweep import DeviceSweep, device_sweep

__all__ = ["BatchedGradient", "vmap_grad", "vmap_value_and_grad"]


@dataclass(frozen=True)
class Plan:
    """One call's layout: the views of the arguments, their slots, the sweep and the kernel's names."""

    args: tuple[Any, ...]
    views: tuple[ArgView, ...]
    n: int
    slots: tuple[Slot, ...]
    sweep: DeviceSweep
    names: KernelNames

    @property
    def result_dtype(self) -> np.dtype:
        return np.dtype(self.sweep.exported.abi.result.dtype)


class BatchedGradient:
    """Per-sample gradients (and values) of ``f`` over a batch; see :func:`vmap_grad`."""

    def __init__(self, f: Callable[..., Any], wrt: Wrt, in_axes: InAxes, with_value: bool) -> None:
        if not callable(f):
            raise ArgumentTypeError(f"pyjlad.gpu needs a callable, got {type(f).__name__}")
        self.__wrapped__ = f
        self.in_axes = _normalize_in_axes(in_axes)
        self._wrt, self._single = _normalize_wrt(wrt)
        self._requested = (wrt,) if self._single else tuple(wrt)  # type: ignore[arg-type]
        self._with_value = with_value
        self._loops: dict[tuple[Any, ...], Any] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        kind = "vmap_value_and_grad" if self._with_value else "vmap_grad"
        name = getattr(self.__wrapped__, "__name__", self.__wrapped__)
        wrt = self._requested[0] if self._single else self._requested
        return f"<pyjlad.gpu.{kind} of {name}, wrt={wrt!r}, in_axes={self.in_axes!r}>"

    # -- the layout of a call --------------------------------------------------------------------

    def plan(self, args: tuple[Any, ...]) -> Plan:
        """Views, slots, Enzyme's sweep and the kernel's names for a call with ``args``."""
        if self._wrt[-1] >= len(args):
            raise UnsupportedFunctionError(f"wrt={self._wrt[-1]} is out of range for a call with "
                                           f"{len(args)} argument(s)")
        axes = _axes_for(self.in_axes, len(args))
        views = tuple(view_of(a, k) for k, a in enumerate(args))
        n = batch_size(list(views), axes)
        slots = slots_for(list(views), axes, self._wrt)
        sweep = device_sweep(self.__wrapped__, sample_argtypes(slots), self._wrt)
        for slot in slots:
            arg = sweep.exported.abi.args[slot.index]
            if slot.is_array and not slot.mapped and getattr(arg, "writes", False):
                raise UnsupportedFunctionError(
                    f"{sweep.exported.name} may write to argument {slot.index}, which every sample shares "
                    "(in_axes None): the samples would race; map it (in_axes 0) or do not write to it")
        return Plan(args, views, n, slots, sweep, kernel_names(sweep.driver, slots, self._wrt))

    def _gradient_shapes(self, plan: Plan) -> list[tuple[tuple[int, ...], np.dtype]]:
        return [((plan.n, *plan.slots[k].sample_shape), np.dtype(plan.slots[k].dtype)) for k in self._wrt]

    def _params(self, plan: Plan, addresses: list[int | None], gradients: list[int], values: int,
                status: int, failures: int) -> list[Any]:
        """The kernel's parameters after ``n``: argument addresses or values, gradients, values, statuses,
        the failure count."""
        params: list[Any] = []
        for slot, view, address in zip(plan.slots, plan.views, addresses):
            if slot.by_value:
                params.append(np.uint8(view.value) if slot.dtype == "bool" else np.dtype(slot.dtype).type(view.value))
            else:
                params.append(address)
        return [*params, *gradients, values, status, failures]

    def _result(self, values: Any, gradients: list[Any]) -> Any:
        by_index = dict(zip(self._wrt, gradients))
        seen: set[int] = set()
        ordered = []
        for k in self._requested:
            g = by_index[k]
            ordered.append(_copy(g) if k in seen else g)
            seen.add(k)
        grads = ordered[0] if self._single else tuple(ordered)
        return (values, grads) if self._with_value else grads

    def _raise_failures(self, plan: Plan, status: np.ndarray, sample: Callable[[int], tuple[Any, ...]]) -> None:
        """Raise the first failing sample's exception, with a note counting the batch's failures."""
        failed = np.flatnonzero(status)
        first = int(failed[0])
        name = getattr(self.__wrapped__, "__name__", self.__wrapped__)
        shown = ", ".join(map(str, failed[:10])) + (", ..." if failed.size > 10 else "")
        summary = (f"{failed.size} of {plan.n} samples of the pyjlad.gpu batched gradient of {name} failed "
                   f"(samples {shown}; Numba status {int(status[first])})")
        try:
            arguments = sample(first)
        except ArgumentError as exc:
            raise DifferentiatedFunctionError(f"{summary}; {exc}") from None
        try:
            reraise_from_function(self.__wrapped__, arguments)
        except Exception as exc:
            exc.add_note(f"raised by sample {first}: {summary}")
            raise

    # -- the CPU check ---------------------------------------------------------------------------

    def on_cpu(self, *args: Any) -> Any:
        """The same per-sample body compiled for the CPU, over NumPy arguments (results: NumPy arrays).

        The kernel's body (Enzyme's output for NVPTX with libm's names back, the
        generated per-sample code) in a plain loop: how the generated code is
        checked without a GPU. Slower than :func:`pyjlad.vmap` (one thread).
        """
        from .host import host_loop

        plan = self.plan(args)
        if any(view.device for view in plan.views):
            raise ArgumentTypeError("on_cpu takes NumPy arrays and numbers; a device array was given")
        key = ("cpu", plan.names.host)
        loop = self._loops.get(key)
        if loop is None:
            with self._lock:
                loop = self._loops.get(key) or host_loop(plan.sweep, plan.slots, self._wrt, plan.names)
                self._loops[key] = loop
        gradients = [np.zeros(shape, dtype) for shape, dtype in self._gradient_shapes(plan)]
        values = np.zeros(plan.n, plan.result_dtype)
        status = np.zeros(plan.n, np.int32)
        failures = np.zeros(1, np.int32)
        addresses = [view.address or None for view in plan.views]
        params = self._params(plan, addresses, [g.ctypes.data for g in gradients], values.ctypes.data,
                              status.ctypes.data, failures.ctypes.data)
        loop(plan.n, [int(p) if isinstance(p, (int, np.integer)) else p for p in params])
        if failures[0]:
            self._raise_failures(plan, status, lambda i: _host_sample(plan, i))
        return self._result(values, gradients)

    # -- PTX and the GPU -------------------------------------------------------------------------

    def ptx(self, *args: Any, arch: str = "sm_80") -> str:
        """The PTX of the kernel for a call with ``args`` (NumPy or device arrays; only their layout is read)."""
        return self._kernel_ptx(self.plan(args), arch).ptx

    def _kernel_ptx(self, plan: Plan, arch: str) -> Any:
        from .ptx import kernel_ptx

        key = ("ptx", plan.names.kernel, arch)
        built = self._loops.get(key)
        if built is None:
            built = self._loops[key] = kernel_ptx(plan.sweep, plan.slots, self._wrt, plan.names, arch)
        return built

    def __call__(self, *args: Any) -> Any:
        """Per-sample gradients on the GPU (see :func:`vmap_grad`)."""
        from .launch import runner

        gpu = runner()
        on_device = any(is_device_array(a) for a in args)
        for arg in args:
            if is_device_array(arg):
                gpu.wait_for(arg.__cuda_array_interface__)
        # NumPy arguments are copied (C-contiguous); device arrays are read where they lie.
        moved = tuple(gpu.to_device(a) if isinstance(a, np.ndarray) else a for a in args)
        plan = self.plan(moved)
        kernel = gpu.kernel(self._kernel_ptx(plan, gpu.arch).ptx, plan.names.kernel)
        gradients = [gpu.allocate(shape, dtype) for shape, dtype in self._gradient_shapes(plan)]
        values = gpu.allocate((plan.n,), plan.result_dtype)
        status = gpu.allocate((plan.n,), np.int32)
        failures = gpu.to_device(np.zeros(1, np.int32))
        addresses = [None if slot.by_value else view.address for slot, view in zip(plan.slots, plan.views)]
        params = self._params(plan, addresses, [g.address for g in gradients], values.address, status.address,
                              failures.address)
        gpu.launch(kernel, plan.n, params)
        if failures.copy_to_host()[0]:  # one number read back; the n statuses only when a sample failed
            self._raise_failures(plan, status.copy_to_host(), lambda i: _device_sample(plan, i))
        if on_device:
            return self._result(values, gradients)
        return self._result(values.copy_to_host(), [g.copy_to_host() for g in gradients])


def _copy(g: Any) -> Any:
    return g.copy() if isinstance(g, np.ndarray) else g


def _host_sample(plan: Plan, i: int) -> tuple[Any, ...]:
    """Sample ``i``'s arguments, from NumPy arguments."""
    return tuple(a[i] if slot.mapped else a for a, slot in zip(plan.args, plan.slots))


def _device_sample(plan: Plan, i: int) -> tuple[Any, ...]:
    """Sample ``i``'s arguments on the host, copied back from the device."""
    from .launch import runner

    out = []
    for arg, view, slot in zip(plan.args, plan.views, plan.slots):
        if not view.device:
            out.append(arg)
            continue
        whole = np.empty(view.shape, np.bool_ if view.dtype == "bool" else view.dtype)
        if view.strides != whole.strides:
            raise ArgumentError(f"argument {slot.index} is a strided device array, which pyjlad does not copy "
                                "back to re-run the failing sample; run the batch with a contiguous copy to see it")
        runner().copy_to_host(whole, view.address)
        out.append(whole[i] if slot.mapped else whole)
    return tuple(out)


def vmap_grad(f: Callable[..., Any], wrt: Wrt = 0, in_axes: InAxes = 0) -> BatchedGradient:
    """Per-sample gradients of ``f`` over a batch, on an NVIDIA GPU.

    ``vmap_grad(f, wrt, in_axes)(*args)`` gives what
    ``pyjlad.vmap(pyjlad.grad(f, wrt), in_axes)(*args)`` gives, from a CUDA kernel
    with one thread per sample.

    Parameters
    ----------
    f : callable
        An ``@njit`` function (or plain function) of one sample returning a
        real number; numbers and small arrays as arguments; no calls without a
        device counterpart (temporary arrays, BLAS/LAPACK, printing).
    wrt : int or tuple of int
        Argument position(s) to differentiate, as in :func:`pyjlad.grad`.
    in_axes : 0, None or tuple of them
        As in :func:`pyjlad.vmap`: ``0`` maps an argument over its leading axis,
        ``None`` shares it between all samples.

    Returns
    -------
    BatchedGradient
        Called with NumPy arrays: NumPy results. Called with any array with
        ``__cuda_array_interface__``: results on the device
        (:class:`pyjlad.gpu.DeviceArray`), inputs read in place. A gradient has
        the shape ``(n, *sample_shape)`` of its argument's samples.
        ``.on_cpu(*args)`` runs the same generated per-sample code on the CPU;
        ``.ptx(*args)`` gives the kernel's PTX.

    Raises
    ------
    EngineUnavailableError
        No CUDA driver or GPU (when called; ``on_cpu`` and ``ptx`` need none).
    MissingDependencyError
        cuda-core is not installed (when called).
    """
    return BatchedGradient(f, wrt, in_axes, with_value=False)


def vmap_value_and_grad(f: Callable[..., Any], wrt: Wrt = 0, in_axes: InAxes = 0) -> BatchedGradient:
    """As :func:`vmap_grad`, returning ``(values, gradients)``: ``values[i]`` is ``f`` at sample ``i``."""
    return BatchedGradient(f, wrt, in_axes, with_value=True)
