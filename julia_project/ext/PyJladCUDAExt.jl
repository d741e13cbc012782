"""
Batched gradients on the GPU: for an elementwise (per-sample) function of
scalars exported by pyjlad and retargeted to NVPTX, a CUDA.jl kernel calls
Enzyme's device-side `autodiff_deferred` once per sample.

Load the function from the module pyjlad retargets for the device:
`python -m pyjlad export mod.py:f --signature "float64, float64" --target nvptx -o out/`
writes `out/pyjlad_f.nvptx.ll` (libm calls and the math intrinsics NVPTX cannot
lower are calls to libdevice's `__nv_*`, which CUDA.jl links), then
`f = load_exported("out/pyjlad_f.nvptx.ll", "out/pyjlad_f.nvptx.json")`.
Only functions free of host-only calls (no temporary arrays, BLAS/LAPACK,
custom rules) are exported for the device; pyjlad's tests compile the
retargeted module and Enzyme's derivative of it to PTX and assemble it with
`ptxas` (no GPU there: this kernel itself has not been run).
"""
module PyJladCUDAExt

using CUDA, Enzyme, PyJlad

function _kernel!(f, dxs, xs, consts)
    i = (blockIdx().x - 1) * blockDim().x + threadIdx().x
    if i <= length(xs)
        d = autodiff_deferred(Reverse, Const(f), Active, Active(xs[i]), map(Const, consts)...)
        @inbounds dxs[i] = d[1][1]
    end
    return nothing
end

"""
    PyJlad.batched_gradient(f, xs::CuArray, consts...) -> CuArray

Derivative of the scalar function `f(x, consts...)` with respect to `x` at every
element of `xs`, one GPU thread per element.
"""
function PyJlad.batched_gradient(f::PyJlad.NumbaFunction, xs::CuArray{T}, consts...) where {T}
    dxs = similar(xs)
    threads = 256
    @cuda threads = threads blocks = cld(length(xs), threads) _kernel!(f, dxs, xs, consts)
    return dxs
end

end # module
