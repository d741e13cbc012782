"""
    PyJlad

The Julia engine of pyjlad: loads a Numba function exported by
`python -m pyjlad export` (portable LLVM IR + ABI description), calls it through
`Base.llvmcall`, and differentiates it with Enzyme.jl, on its own or inside
larger Julia code. Requires Julia 1.12 or later (see `load_ir`).

```julia
using PyJlad, Enzyme
f = load_exported("out/pyjlad_energy.ll", "out/pyjlad_energy.json")
x = rand(100)
f(x, 2.0)                                           # calls the Numba code
dx = zero(x)
autodiff(Reverse, f, Active, Duplicated(x, dx), Active(2.0))
```

Arrays of 2 or more dimensions must have the layout the function was exported
for: a Julia `Array` is column-major, so export with layout `A` (any strides,
`--signature "float64[:, :]"`) or `F`; a C-layout export takes row-major data
(`NumbaArray`s made from NumPy arrays).
"""
module PyJlad

using Enzyme
import JSON3

export NumbaFunction, NumbaArray, load_exported, load_ir, sweep, hvp_exported, batched_gradient

"Defined by the CUDA extension (`using CUDA`): per-element gradients on the GPU."
function batched_gradient end

# Enzyme's "loop-invariant cache" copies a loop's loads in one piece before the loop when no store of the loop
# aliases a load in the same iteration. A loop that reads what an earlier iteration wrote (`y[i] = x[i] + a *
# y[i - 1]`) then has its array copied before the loop writes it, and its derivatives with respect to `a` are
# wrong, with no error (Enzyme v0.0.289; pyjlad's embedded engine runs Enzyme with the cache off). This turns
# it off in the Enzyme library of this Julia session, through Enzyme.jl's `API.EnzymeSetCLBool` (which looks
# the option up by name): a global setting, so every derivative of the session is built without it, not only
# PyJlad's; memory-bound derivatives may be slower. Not executed: no Julia on pyjlad's build machines.
function __init__()
    try
        Enzyme.API.EnzymeSetCLBool(:EnzymeLoopInvariantCache, false)
    catch err
        @warn "PyJlad could not turn off Enzyme's loop-invariant cache: derivatives of loops that read what " *
              "an earlier iteration wrote may be wrong" exception = err
    end
end

# ----------------------------------------------------------------- types
# Julia 1.12 (LLVM 18, opaque pointers) lowers each of these to the LLVM type named
# (julia src/cgutils.cpp, bitstype_to_llvm: `jl_is_cpointer_type -> PointerType::get(ctxt, 0)`,
# Bool -> i8 outside llvmcall's own struct rules), and src/ccall.cpp emit_llvmcall rejects a
# module entry whose parameter types differ ("Malformed llvmcall: argument ... does not match").
const LLVM_TYPES = Dict(
    "double" => Float64, "float" => Float32, "i64" => Int64, "i32" => Int32,
    "i16" => Int16, "i8" => Int8, "ptr" => Ptr{Cvoid},
)
const LLVM_NAMES = Dict(v => k for (k, v) in LLVM_TYPES)
const DTYPES = Dict(
    "float64" => Float64, "float32" => Float32, "int64" => Int64, "int32" => Int32,
    "int16" => Int16, "int8" => Int8, "uint64" => UInt64, "uint32" => UInt32,
    "uint16" => UInt16, "uint8" => UInt8, "bool" => Bool, "none" => Nothing,
)

"A scalar argument: NumPy dtype `T`, passed to llvmcall as the same-sized LLVM type `L`."
struct ScalarSpec{T,L} end
"An array argument: element type `T`, `N` dimensions, Numba layout `Layout` (`:C`, `:F` or `:A`)."
struct ArraySpec{T,N,Layout} end

"""
    NumbaFunction{IR,Entry,Args,R}

A Numba function loaded from portable IR. Everything is a type parameter (the
module text and entry as `Symbol`s, `Args` a `Tuple` of `ScalarSpec`/`ArraySpec`,
`R` the result type), so the value is an isbits singleton: no `@eval`, no world-age
hazards, and it can be passed to a GPU kernel. Call it with Julia arrays,
`NumbaArray`s and scalars; differentiate it with Enzyme.jl.
"""
struct NumbaFunction{IR,Entry,Args<:Tuple,R} end

Base.show(io::IO, ::NumbaFunction{IR,E,A,R}) where {IR,E,A,R} =
    print(io, "NumbaFunction(", E, ", ", fieldcount(A), " arguments -> ", R, ")")

"""
    NumbaArray(buffer, offset, shape, strides)

An array as Numba sees it: elements in `buffer` (a flat `Vector`, so Enzyme can
shadow it), the first element at index `offset + 1`, `shape` and `strides` in
elements. A shadow must have the same `offset`, `shape`, `strides` and buffer
length as its primal (Enzyme indexes it with the primal's strides).
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

# ------------------------------------------------------------- loading
# C library functions Julia's JIT resolves in its own process (libm, libc); any other
# external symbol (SciPy's BLAS/LAPACK behind numba_xx*, cblas_*) would abort Julia at
# link time ("Symbols not found"), so such modules are refused before llvmcall sees them.
const LIBM = Set(split("""sin cos tan asin acos atan atan2 sinh cosh tanh asinh acosh atanh exp exp2
    expm1 log log2 log10 log1p pow sqrt cbrt hypot erf erfc tgamma lgamma fmod floor ceil trunc round
    rint nearbyint fabs copysign fmin fmax fma ldexp frexp modf remainder"""))
const LIBC = Set(["malloc", "calloc", "realloc", "free", "memcpy", "memmove", "memset", "abort"])

_resolvable(name) = startswith(name, "llvm.") || name in LIBC || name in LIBM ||
                    (endswith(name, "f") && chop(name) in LIBM)

function _check_externals(ir::AbstractString)
    for m in eachmatch(r"^declare[^@\n]*@\"?([^\"(\s]+)\"?\("m, ir)
        name = m.captures[1]
        _resolvable(name) || throw(ArgumentError(
            "the exported function calls `$name`, which Julia's JIT cannot resolve " *
            "(BLAS/LAPACK from SciPy, or Numba's runtime): use pyjlad's embedded engine for it"))
    end
end

_lookup(table, name, what) = get(() -> throw(ArgumentError("unsupported $what: $name")), table, String(name))

function _scalar_spec(arg, param)
    T = _lookup(DTYPES, arg[:dtype], "dtype")
    L = _lookup(LLVM_TYPES, param[:type], "LLVM parameter type")
    sizeof(T) == sizeof(L) || throw(ArgumentError("$(arg[:dtype]) passed as $(param[:type])"))
    return ScalarSpec{T,L}
end

_array_spec(arg) = ArraySpec{_lookup(DTYPES, arg[:dtype], "dtype"),Int(arg[:ndim]),Symbol(arg[:layout])}

"""
    load_ir(ir::AbstractString, abi_json::AbstractString) -> NumbaFunction

The function described by the ABI (JSON text, the `.json` that `pyjlad export`
writes) in the module text `ir` (the `.ll`, already llvmcall-ready: no target
lines, no references to Numba's runtime). This is what Python calls (a JSON
string crosses juliacall as a Julia `String`; a Python dict would arrive as a
`PyDict{Py,Py}`, whose keys and values are Python objects).
"""
function load_ir(ir::AbstractString, abi_json::AbstractString)
    # Ptr{T} is an LLVM `ptr` in llvmcall only from Julia 1.12 (JuliaLang/julia#53687); 1.11's
    # default context uses typed pointers and cannot parse `ptr` (JuliaLang/julia#54188).
    VERSION >= v"1.12" || error("PyJlad needs Julia 1.12 or later (this is $VERSION)")
    abi = JSON3.read(abi_json)
    abi[:format] == "pyjlad-abi/1" || throw(ArgumentError("not a pyjlad ABI description: $(abi[:format])"))
    _check_externals(ir)
    params = abi[:params]
    specs = Any[]
    for (index, arg) in enumerate(abi[:args])
        mine = [p for p in params if p[:arg] == index - 1]
        push!(specs, arg[:kind] == "array" ? _array_spec(arg) : _scalar_spec(arg, only(mine)))
    end
    Args = Tuple{specs...}
    declared = DataType[_lookup(LLVM_TYPES, p[:type], "LLVM parameter type") for p in params]
    declared == _param_types(Args) ||
        throw(ArgumentError("ABI parameters $(declared) do not match its arguments $(_param_types(Args))"))
    R = _lookup(DTYPES, abi[:result][:dtype], "result dtype")
    return NumbaFunction{Symbol(ir),Symbol(String(abi[:entry])),Args,R}()
end

"""
    load_exported(ir_path, abi_path) -> NumbaFunction

Load the files `python -m pyjlad export` writes (see `load_ir`).
"""
load_exported(ir_path::AbstractString, abi_path::AbstractString) =
    load_ir(read(ir_path, String), read(abi_path, String))

# ------------------------------------------------------------- calling
_param_types(::Type{ScalarSpec{T,L}}) where {T,L} = DataType[L]
_param_types(::Type{ArraySpec{T,N,Lay}}) where {T,N,Lay} =
    DataType[Ptr{Cvoid}, Ptr{Cvoid}, Int64, Int64, Ptr{Cvoid}, fill(Int64, 2N)...]
_param_types(::Type{A}) where {A<:Tuple} = reduce(vcat, (_param_types(S) for S in fieldtypes(A)); init=DataType[])

# The llvmcall of the entry `i32 (ptr retptr, ptr excinfo, params...)`. The IR and entry are
# type parameters, so the module text is a literal in the generated body: Enzyme.jl builds
# its own llvmcall helpers the same way (Enzyme.jl src/typeutils/recursive_add.jl,
# atomicrmw_add!; src/compiler.jl returns `Base.llvmcall(($ir, $fn), ...)` from a generator).
# fatou-ignore unused-argument: `ret` and `exc` are used by the generated expression
@generated function _entry(::NumbaFunction{IR,E,A,R}, ret::Ptr{Cvoid}, exc::Ptr{Cvoid},
                           params::Vararg{Any,M}) where {IR,E,A,R,M}
    types = _param_types(A)
    collect(params) == types ||
        return :(throw(ArgumentError($("parameters $(collect(params)) do not match $types"))))
    ir, entry = String(IR), String(E)
    return quote
        Base.llvmcall(($ir, $entry), Int32, Tuple{Ptr{Cvoid},Ptr{Cvoid},$(types...)},
                      ret, exc, $((:(params[$i]) for i in 1:M)...))
    end
end

@generated _specs(::Type{A}) where {A<:Tuple} = Expr(:tuple, (:($S()) for S in fieldtypes(A))...)

@inline _flatten(::ScalarSpec{T,L}, x) where {T,L} = (_as_llvm(L, convert(T, x)),)
# Bool and unsigned values go to llvmcall as the signed integer of the same size (Numba's
# `i8` for a bool argument, `i64` for a uint64).
@inline _as_llvm(::Type{L}, v::L) where {L} = v
@inline _as_llvm(::Type{L}, v) where {L} = reinterpret(L, v)

@inline _flatten(::ArraySpec{T,N}, x::NumbaArray{T,N}) where {T,N} = (
    C_NULL, C_NULL, Int64(prod(x.shape; init=1)), Int64(sizeof(T)),
    Ptr{Cvoid}(pointer(x.buffer, x.offset + 1)),
    Int64.(x.shape)..., (Int64.(x.strides) .* sizeof(T))...,
)
@inline _flatten(s::ArraySpec{T,N}, x::Array{T,N}) where {T,N} = _flatten(s, NumbaArray(x))
_flatten(::ArraySpec{T,N}, x) where {T,N} =
    throw(ArgumentError("expected an Array{$T,$N} or NumbaArray{$T,$N}, got $(typeof(x))"))

@inline _flatten_all(::Tuple{}, ::Tuple{}) = ()
@inline _flatten_all(s::Tuple, a::Tuple) = (_flatten(first(s), first(a))..., _flatten_all(Base.tail(s), Base.tail(a))...)

"Whether `strides` are those of a contiguous array of `shape` (`order` `:C` or `:F`); size-1 axes are free."
function _contiguous(shape::NTuple{N,Int}, strides::NTuple{N,Int}, order::Symbol) where {N}
    expected = 1
    for k in (order === :C ? (N:-1:1) : (1:N))
        shape[k] == 1 || strides[k] == expected || return false
        expected *= shape[k]
    end
    return true
end

_check_layout(::ScalarSpec, x) = nothing
_check_layout(::ArraySpec{T,N,L}, x::Array) where {T,N,L} = _check_layout(ArraySpec{T,N,L}(), NumbaArray(x))
_check_layout(::ArraySpec, x) = nothing   # wrong types are reported by _flatten
function _check_layout(::ArraySpec{T,N,L}, x::NumbaArray) where {T,N,L}
    L === :A || _contiguous(x.shape, x.strides, L) || throw(ArgumentError(
        "this function was exported for $L-contiguous arrays, got shape $(x.shape) with strides $(x.strides) " *
        "(a Julia Array is column-major): export it with layout A, e.g. --signature \"float64[:, :]\""))
    return nothing
end

"""
    (f::NumbaFunction)(args...)

Call the Numba function. Arrays may be Julia `Array`s or `NumbaArray`s;
scalars are converted to the exported types. Throws if the Numba code raised.
"""
function (f::NumbaFunction{IR,E,A,R})(args::Vararg{Any,N}) where {IR,E,A,R,N}
    N == fieldcount(A) || throw(ArgumentError("$E takes $(fieldcount(A)) arguments, got $N"))
    specs = _specs(A)
    map(_check_layout, specs, args)
    params = _flatten_all(specs, args)
    ret = Ref{R === Nothing ? Int64 : R}()
    exc = Ref{Ptr{Cvoid}}(C_NULL)
    status = GC.@preserve ret exc args begin
        _entry(f, Ptr{Cvoid}(Base.unsafe_convert(Ptr{eltype(ret)}, ret)),
               Ptr{Cvoid}(Base.unsafe_convert(Ptr{Ptr{Cvoid}}, exc)), params...)
    end
    status == 0 || error("$E raised a Python exception (status $status); call it from Python to see it")
    return R === Nothing ? nothing : ret[]
end

# ------------------------------------------------------- Enzyme sweeps
function _annotate(act::AbstractString, x, shadow)
    act == "const" && return Const(x)
    act == "active" && return Active(x)
    act in ("dup", "dupnoneed") || throw(ArgumentError("unknown activity $act"))
    x isa NumbaArray && _check_twin(x, shadow)
    return act == "dup" ? Duplicated(x, shadow) : DuplicatedNoNeed(x, shadow)
end

function _check_twin(x::NumbaArray, s)
    s isa NumbaArray && typeof(s) == typeof(x) && s.offset == x.offset && s.shape == x.shape &&
        s.strides == x.strides && length(s.buffer) == length(x.buffer) && return nothing
    throw(ArgumentError("a shadow must have its primal's type, offset, shape, strides and buffer length"))
end

"""
    sweep(f, mode, activities, args, shadows, seed) -> (value, tangent_or_seed, adjoints)

One Enzyme.jl sweep with pyjlad's activities (`"const"`, `"active"`, `"dup"`,
`"dupnoneed"`; `shadows` holds one entry per `dup`/`dupnoneed` argument, in order):
the same contract as the embedded engine's compiled sweeps. `f` runs once.
"""
function sweep(f::NumbaFunction, mode::AbstractString, activities, args::Tuple, shadows::Tuple, seed::Real)
    length(activities) == length(args) || throw(ArgumentError("one activity per argument"))
    dup = [a in ("dup", "dupnoneed") for a in activities]
    count(dup) == length(shadows) || throw(ArgumentError("one shadow per dup/dupnoneed argument"))
    slot = cumsum(dup)
    annotated = ntuple(i -> _annotate(activities[i], args[i], dup[i] ? shadows[slot[i]] : nothing), length(args))
    # `annotated` is built at run time; the call below is the function barrier past which
    # every type is concrete.
    mode == "reverse" && return _reverse(f, Float64(seed), Tuple(String.(activities)), annotated...)
    mode == "forward" && return _forward(f, annotated...)
    throw(ArgumentError("mode must be \"reverse\" or \"forward\", got $mode"))
end

_adjoints(activities, derivs) = Tuple(Float64(d) for (a, d) in zip(activities, derivs) if a == "active")

function _reverse(f::NumbaFunction{IR,E,A,R}, seed::Float64, activities, annotated::Vararg{Any,N}) where {IR,E,A,R,N}
    if !(R <: AbstractFloat)
        derivs, value = autodiff(ReverseWithPrimal, Const(f), Const, annotated...)
        return (R === Nothing ? 0.0 : Float64(value), seed, _adjoints(activities, derivs))
    end
    # Split mode: one forward pass gives the primal and the tape, the reverse pass takes the
    # seed as the result's adjoint (Enzyme.jl src/Enzyme.jl, autodiff_thunk docstring).
    forward, pullback = autodiff_thunk(ReverseSplitWithPrimal, Const{typeof(f)}, Active, map(Core.Typeof, annotated)...)
    tape, value, _ = forward(Const(f), annotated...)
    derivs = pullback(Const(f), annotated..., R(seed), tape)[1]
    return (Float64(value), seed, _adjoints(activities, derivs))
end

function _forward(f::NumbaFunction{IR,E,A,R}, annotated::Vararg{Any,N}) where {IR,E,A,R,N}
    if !(R <: AbstractFloat)
        autodiff(Forward, Const(f), Const, annotated...)
        return (0.0, 0.0, ())
    end
    tangent, value = autodiff(ForwardWithPrimal, Const(f), Duplicated, annotated...)
    return (Float64(value), Float64(tangent), ())
end

# ---------------------------------------------------- Hessian-vector products
@inline _wrt(::Val{I}, args::Tuple, shadow) where {I} =
    ntuple(i -> i == I ? (shadow === nothing ? Active(args[i]) : Duplicated(args[i], shadow)) : Const(args[i]),
           Val(length(args)))

"The gradient of `f` with respect to array argument `I`, accumulated into `dx`."
function _gradient_into!(dx, mode, f, wrt::Val, args...)
    autodiff(mode, Const(f), Active, _wrt(wrt, args, dx)...)
    return nothing
end

"The derivative of `f` with respect to scalar argument `I`."
_derivative(mode, f, wrt::Val{I}, args...) where {I} = autodiff(mode, Const(f), Active, _wrt(wrt, args, nothing)...)[1][I]

"""
    hvp_exported(f, args::Tuple, wrt, v; runtime_activity=false) -> H*v

Hessian-vector product of the scalar function `f` with respect to argument
`wrt` (1-based), by forward over reverse, as Enzyme.jl's own `hvp!` does
(src/sugar.jl). `runtime_activity=true` runs both sweeps with Enzyme's runtime
activity: pyjlad asks for it when the function merges a constant array's memory
with other memory (arguments marked `aliased` in the ABI).
"""
function hvp_exported(f::NumbaFunction, args::Tuple, wrt::Integer, v; runtime_activity::Bool=false)
    x = args[wrt]
    hv = x isa Number ? nothing : zero(x)
    return _hvp!(hv, f, args, Val(Int(wrt)), v, runtime_activity)
end

"""
    hvp_exported!(hv, f, args::Tuple, wrt, v; runtime_activity=false) -> hv

`hvp_exported` for an array argument, writing H*v into `hv` (a twin of the
argument: same offset, shape, strides and buffer length).
"""
function hvp_exported!(hv, f::NumbaFunction, args::Tuple, wrt::Integer, v; runtime_activity::Bool=false)
    return _hvp!(hv, f, args, Val(Int(wrt)), v, runtime_activity)
end

# Only the array's own elements: a strided view's buffer spans memory between them that
# belongs to other arrays.
function _zero_elements!(a::NumbaArray{T}) where {T}
    for I in CartesianIndices(a.shape)
        a.buffer[a.offset + 1 + sum((Tuple(I) .- 1) .* a.strides; init=0)] = zero(T)
    end
    return a
end
_zero_elements!(a::AbstractArray) = fill!(a, 0)

function _hvp!(hv, f, args::Tuple, wrt::Val{I}, v, runtime_activity::Bool) where {I}
    fwd = runtime_activity ? set_runtime_activity(Forward) : Forward
    rev = runtime_activity ? set_runtime_activity(Reverse) : Reverse
    x = args[I]
    tangents = ntuple(i -> i == I ? Duplicated(args[i], v) : Const(args[i]), Val(length(args)))
    if x isa Number
        return autodiff(fwd, Const(_derivative), Duplicated, Const(rev), Const(f), Const(wrt), tangents...)[1]
    end
    x isa NumbaArray && (_check_twin(x, v); _check_twin(x, hv))
    _zero_elements!(hv)
    dx = zero(x)
    autodiff(fwd, Const(_gradient_into!), Const, Duplicated(dx, hv), Const(rev), Const(f), Const(wrt), tangents...)
    return hv
end

# ------------------------------------------------------- GPU (device) form
# The CUDA extension differentiates this: the entry wrapped in IR that keeps the result and
# the exception slot on the stack and returns NaN when the Numba code raised. No Ref, no
# string, no dynamic dispatch: all a kernel can hold.
# fatou-ignore unused-argument: `args` is used by the generated expression
@generated function device_value(::NumbaFunction{IR,E,A,R}, args::Vararg{Any,N}) where {IR,E,A,R,N}
    all(S -> S <: ScalarSpec, fieldtypes(A)) && R <: Union{Float32,Float64} && N == fieldcount(A) ||
        return :(throw(ArgumentError("device_value needs a function of scalars with a float result")))
    types = _param_types(A)
    names = LLVM_NAMES[R]
    decl = join(("$(LLVM_NAMES[T]) %p$i" for (i, T) in enumerate(types)), ", ")
    pass = join(("$(LLVM_NAMES[T]) %p$i" for (i, T) in enumerate(types)), ", ")
    wrapper = """

    define $names @pyjlad.device.value($decl) alwaysinline {
      %ret = alloca $names, align 8
      %exc = alloca ptr, align 8
      %status = call i32 @$E(ptr %ret, ptr %exc$(isempty(pass) ? "" : ", ")$pass)
      %v = load $names, ptr %ret, align 8
      %ok = icmp eq i32 %status, 0
      %r = select i1 %ok, $names %v, $names 0x7FF8000000000000
      ret $names %r
    }
    """
    ir = String(IR) * wrapper
    specs = fieldtypes(A)
    converted = [:(_flatten($(specs[i])(), args[$i])[1]) for i in 1:N]
    return :(Base.llvmcall(($ir, "pyjlad.device.value"), $R, Tuple{$(types...)}, $(converted...)))
end

end # module
