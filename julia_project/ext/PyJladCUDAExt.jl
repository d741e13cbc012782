"""
Batched gradients on the GPU: for an elementwise (per-sample) function of
scalars exported by pyjlad and retargeted to NVPTX, a CUDA.jl kernel calls
Enzyme's device-side `autodiff_deferred` once per sample.

Only functions whose portable module is free of host-only calls (no NRT
allocation, no BLAS, no libm beyond what NVPTX lowers) can run on the device.
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
