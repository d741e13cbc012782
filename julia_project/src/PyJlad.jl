"""
    PyJlad

The Julia engine of pyjlad: loads a Numba function exported by
`python -m pyjlad export` (portable LLVM IR + ABI description), calls it through
`Base.llvmcall`, and differentiates it with Enzyme.jl, on its own or inside
larger Julia code.

```julia
using PyJlad, Enzyme
f = load_exported("out/pyjlad_energy.ll", "out/pyjlad_energy.json")
x = rand(100)
f(x, 2.0)                                           # calls the Numba code
dx = zero(x)
autodiff(Reverse, f, Active, Duplicated(x, dx), Active(2.0))
```

Arrays of 2 or more dimensions are passed with their own (column-major) strides,
so export such functions with layout `A` or `F` (`--signature "float64[:, :]"`).
"""
module PyJlad

using Enzyme
import JSON3

export NumbaFunction, NumbaArray, load_exported, sweep, hvp_exported, batched_gradient

"Defined by the CUDA extension (`using CUDA`): per-element gradients on the GPU."
function batched_gradient end

# LLVM parameter types of the ABI description -> Julia types.
const LLVM_TYPES = Dict(
    "double" => Float64, "float" => Float32, "i64" => Int64, "i32" => Int32,
    "i16" => Int16, "i8" => Int8, "i1" => Bool, "ptr" => Ptr{Cvoid},
)
const DTYPES = Dict(
    "float64" => Float64, "float32" => Float32, "int64" => Int64, "int32" => Int32,
    "int16" => Int16, "int8" => Int8, "uint8" => UInt8, "bool" => Bool, "none" => Nothing,
)

"""
    NumbaFunction

A Numba function loaded from portable IR: callable with Julia arrays and
scalars, differentiable with Enzyme.jl. `raw` is the `llvmcall` wrapper of the
entry `i32 (ptr retptr, ptr excinfo, params...)`.
"""
struct NumbaFunction{F,R}
    entry::String
    args::Vector{Any}          # one ABI entry (a JSON object) per argument
    raw::F
end

function _raw_function(ir::String, entry::String, param_types::Vector{DataType})
    names = [Symbol(:p, i) for i in eachindex(param_types)]
    sig = Expr(:curly, :Tuple, Ptr{Cvoid}, Ptr{Cvoid}, param_types...)
    # llvmcall needs the IR as a literal: build the wrapper with @eval.
    return @eval function (ret::Ptr{Cvoid}, exc::Ptr{Cvoid}, $(names...))
        Base.llvmcall(($ir, $entry), Int32, $sig, ret, exc, $(names...))
    end
end

"""
    load_exported(ir_path, abi_path) -> NumbaFunction
    load_exported(ir::String, abi::AbstractDict) -> NumbaFunction
"""
function load_exported(ir_path::AbstractString, abi_path::AbstractString)
    return load_exported(read(ir_path, String), JSON3.read(read(abi_path, String)))
end

function load_exported(ir::String, abi)
    abi["format"] == "pyjlad-abi/1" || error("not a pyjlad ABI description: $(abi["format"])")
    param_types = DataType[LLVM_TYPES[String(p["type"])] for p in abi["params"]]
    result = DTYPES[String(abi["result"]["dtype"])]
    # The IR is already llvmcall-ready (pyjlad's Julia export: no target lines,
    # no references to Numba's runtime), so it is handed over unchanged.
    raw = _raw_function(ir, String(abi["entry"]), param_types)
    return NumbaFunction{typeof(raw),result}(String(abi["entry"]), collect(abi["args"]), raw)
end

# ------------------------------------------------------------- arguments
"""
    NumbaArray(buffer, offset, shape, strides)

An array as Numba sees it: elements in `buffer` (a flat `Vector`, so Enzyme can
shadow it), the first element at index `offset + 1`, `shape` and `strides` in
elements. Any Julia `StridedArray` converts to one without copying its shape.
"""
struct NumbaArray{T,N}
    buffer::Vector{T}
    offset::Int
    shape::NTuple{N,Int}
    strides::NTuple{N,Int}
end

NumbaArray(x::Array{T,N}) where {T,N} = NumbaArray{T,N}(vec(x), 0, size(x), strides(x))
Base.zero(x::NumbaArray{T,N}) where {T,N} = NumbaArray{T,N}(zero(x.buffer), x.offset, x.shape, x.strides)

"""
    numba_array(address, length, dtype, offset, shape, strides) -> NumbaArray

Wrap memory owned by the caller (a NumPy array passed from Python) without
copying: `length` elements of `dtype` starting at `address`.
"""
function numba_array(address::Integer, length::Integer, dtype::AbstractString, offset::Integer, shape, strides)
    T = DTYPES[dtype]
    buffer = unsafe_wrap(Vector{T}, Ptr{T}(UInt(address)), Int(length); own=false)
    return NumbaArray{T,Base.length(shape)}(buffer, Int(offset), Tuple(Int.(shape)), Tuple(Int.(strides)))
end

_flatten(x::NumbaArray{T,N}) where {T,N} = (
    C_NULL, C_NULL, Int64(prod(x.shape; init=1)), Int64(sizeof(T)),
    Ptr{Cvoid}(pointer(x.buffer, x.offset + 1)),
    Int64.(x.shape)..., (Int64.(x.strides) .* sizeof(T))...,
)
_flatten(x::Array) = _flatten(NumbaArray(x))
_flatten(x::Number) = (x,)

function _check_layout(spec, x)
    if spec["kind"] == "array" && spec["ndim"] >= 2 && spec["layout"] == "C"
        error("this function was exported for C-ordered arrays; Julia arrays are column-major: " *
              "export it with layout A or F (e.g. --signature \"float64[:, :]\")")
    end
end

"""
    (f::NumbaFunction)(args...)

Call the Numba function. Arrays may be Julia `Array`s or `NumbaArray`s;
scalars are converted to the exported types. Throws if the Numba code raised.
"""
function (f::NumbaFunction{F,R})(args...) where {F,R}
    length(args) == length(f.args) || error("$(f.entry) takes $(length(f.args)) arguments, got $(length(args))")
    foreach(_check_layout, f.args, args)
    ret = Ref{R === Nothing ? Int64 : R}(0)
    exc = Ref{Ptr{Cvoid}}(C_NULL)
    params = _params(f, args)
    status = GC.@preserve ret exc args begin
        f.raw(Base.unsafe_convert(Ptr{Cvoid}, Base.unsafe_convert(Ptr{eltype(ret)}, ret)),
              Base.unsafe_convert(Ptr{Cvoid}, Base.unsafe_convert(Ptr{Ptr{Cvoid}}, exc)), params...)
    end
    status == 0 || error("$(f.entry) raised a Python exception (status $status); call it from Python to see it")
    return R === Nothing ? nothing : ret[]
end

function _params(f::NumbaFunction, args)
    out = ()
    for (spec, x) in zip(f.args, args)
        if spec["kind"] == "array"
            out = (out..., _flatten(x)...)
        else
            out = (out..., convert(DTYPES[String(spec["dtype"])], x))
        end
    end
    return out
end

# ------------------------------------------------------- Enzyme sweeps
_annotate(act, x, shadow) =
    act == "const" ? Const(x) :
    act == "active" ? Active(x) :
    act == "dup" ? Duplicated(x, shadow) :
    act == "dupnoneed" ? DuplicatedNoNeed(x, shadow) :
    error("unknown activity $act")

"""
    sweep(f, mode, activities, args, shadows, seed) -> (value, tangent_or_seed, adjoints)

One Enzyme.jl sweep with pyjlad's activities (`"const"`, `"active"`, `"dup"`,
`"dupnoneed"`; `shadows` holds one entry per `dup`/`dupnoneed` argument, in order):
the same contract as the embedded engine's compiled sweeps.
"""
function sweep(f::NumbaFunction{F,R}, mode::AbstractString, activities, args, shadows, seed::Real) where {F,R}
    it = Iterators.Stateful(shadows)
    annotated = [_annotate(a, x, a in ("dup", "dupnoneed") ? popfirst!(it) : nothing)
                 for (a, x) in zip(activities, args)]
    if mode == "reverse"
        if R === Nothing
            derivs = autodiff(Reverse, Const(f), Const, annotated...)[1]
            return (0.0, seed, _adjoints(activities, derivs))
        end
        scaled = (xs...) -> seed * f(xs...)
        derivs, _ = autodiff(ReverseWithPrimal, Const(scaled), Active, annotated...)
        value = f(args...)
        return (value, seed, _adjoints(activities, derivs))
    elseif mode == "forward"
        if R === Nothing
            autodiff(Forward, Const(f), Const, annotated...)
            return (0.0, 0.0, ())
        end
        tangent, value = autodiff(ForwardWithPrimal, Const(f), Duplicated, annotated...)
        return (value, tangent, ())
    end
    error("mode must be \"reverse\" or \"forward\", got $mode")
end

_adjoints(activities, derivs) = Tuple(d for (a, d) in zip(activities, derivs) if a == "active")

"""
    hvp_exported(f, args, wrt, v; runtime_activity=false) -> H*v

Hessian-vector product of the scalar function `f` with respect to argument
`wrt` (1-based), by forward-over-reverse. `runtime_activity=true` runs both
sweeps with Enzyme's runtime activity (`set_runtime_activity`): pyjlad asks for
it when the function merges a constant array's memory with other memory
(arguments marked `aliased` in the ABI), which Enzyme would otherwise shadow
with the array itself.
"""
function hvp_exported(f::NumbaFunction, args, wrt::Integer, v; runtime_activity::Bool=false)
    forward = runtime_activity ? set_runtime_activity(Forward) : Forward
    reverse = runtime_activity ? set_runtime_activity(Reverse) : Reverse
    x = args[wrt]
    function grad_at(y)
        xs = Any[args...]
        xs[wrt] = y
        if y isa Number
            annotated = [i == wrt ? Active(y) : Const(a) for (i, a) in enumerate(xs)]
            return autodiff_deferred(reverse, Const(f), Active, annotated...)[1][wrt]
        end
        dy = zero(y)
        annotated = [i == wrt ? Duplicated(y, dy) : Const(a) for (i, a) in enumerate(xs)]
        autodiff_deferred(reverse, Const(f), Active, annotated...)
        return dy
    end
    return autodiff(forward, grad_at, Duplicated(x, v))[1]
end

end # module
