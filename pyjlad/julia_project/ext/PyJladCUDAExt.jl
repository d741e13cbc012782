"""
Batched gradients on the GPU: for an elementwise (per-sample) function of
scalars exported by pyjlad and retargeted to NVPTX, a CUDA.jl kernel calls
Enzyme's device-side `autodiff_deferred` once per sample (the pattern of
Enzyme.jl's test/cuda.jl).

Load the function from the module pyjlad retargets for the device:
`python -m pyjlad export mod.py:f --signature "float64, float64" --target nvptx -o out/`
writes `out/pyjlad_f.nvptx.ll`, then
`f = load_exported("out/pyjlad_f.nvptx.ll", "out/pyjlad_f.nvptx.json")`.
The kernel differentiates `PyJlad.device_value(f, x, consts...)`: `f` is an isbits
singleton whose IR is a type parameter, the wrapper keeps Numba's result and
exception slots on the stack and returns NaN where the Numba code raised, so the
kernel holds no strings, no heap objects and no dynamic dispatch. Never run here
(no GPU, no Julia on pyjlad's build machines).
"""
module PyJladCUDAExt

using CUDA, Enzyme, PyJlad

function _kernel!(f, dxs, xs, consts)
    i = (blockIdx().x - 1) * blockDim().x + threadIdx().x
    if i <= length(xs)
        d = autodiff_deferred(Reverse, Const(PyJlad.device_value), Active, Const(f), Active(xs[i]),
                              map(Const, consts)...)
        @inbounds dxs[i] = d[1][2]
    end
    return nothing
end

"""
    PyJlad.batched_gradient(f, xs::CuArray, consts...) -> CuArray

Derivative of the scalar function `f(x, consts...)` with respect to `x` at every
element of `xs`, one GPU thread per element (NaN where the Numba code raised).
`consts` must be isbits scalars.
"""
function PyJlad.batched_gradient(f::PyJlad.NumbaFunction, xs::CuArray{T}, consts...) where {T}
    all(isbits, consts) || throw(ArgumentError("the constant arguments must be isbits scalars"))
    dxs = similar(xs)
    threads = 256
    @cuda threads = threads blocks = cld(length(xs), threads) _kernel!(f, dxs, xs, consts)
    return dxs
end

end # module
