# Pkg.test("PyJlad"): the exported fixtures (test/fixtures, written by
# `python -m pyjlad export`) called and differentiated with Enzyme.jl, checked
# against hand-derived derivatives.
using Test, Enzyme, PyJlad

const FIX = joinpath(@__DIR__, "fixtures")
load(name) = load_exported(joinpath(FIX, "pyjlad_$name.ll"), joinpath(FIX, "pyjlad_$name.json"))

@testset "PyJlad" begin
    @testset "call and gradient of a 1-D loop" begin
        f = load("sin_loop")
        x = collect(range(0.0, 1.0; length=50))
        @test f(x) ≈ sum(sin.(x) .* x)
        dx = zero(x)
        autodiff(Reverse, f, Active, Duplicated(x, dx))
        @test dx ≈ cos.(x) .* x .+ sin.(x)
    end

    @testset "2-D array (column-major, layout A) and an active scalar" begin
        f = load("weighted")
        a = reshape(collect(1.0:6.0), 2, 3) ./ 7
        c = 1.5
        expected = sum(c * a[i, j]^2 * i + (j - 1) * a[i, j] for i in 1:2, j in 1:3)
        @test f(a, c) ≈ expected
        da = zero(a)
        derivs, value = autodiff(ReverseWithPrimal, f, Active, Duplicated(a, da), Active(c))
        @test value ≈ expected
        @test da ≈ [2c * a[i, j] * i + (j - 1) for i in 1:2, j in 1:3]
        @test derivs[2] ≈ sum(a[i, j]^2 * i for i in 1:2, j in 1:3)
    end

    @testset "inside larger Julia code: an Euler loop calling the Numba RHS" begin
        rhs = load("rhs")
        function final_state(x0, k)
            x, dt = x0, 1e-3
            for step in 1:1000
                x += dt * rhs(x, k, step * dt)
            end
            return x
        end
        g = autodiff(Reverse, final_state, Active, Active(1.0), Active(0.7))[1]
        h = 1e-6
        @test g[1] ≈ (final_state(1.0 + h, 0.7) - final_state(1.0 - h, 0.7)) / 2h rtol = 1e-6
        @test g[2] ≈ (final_state(1.0, 0.7 + h) - final_state(1.0, 0.7 - h)) / 2h rtol = 1e-6
    end

    @testset "forward mode and the sweep used by Python" begin
        f = load("sin_loop")
        x = collect(range(0.0, 1.0; length=10))
        v = ones(10)
        @test autodiff(Forward, f, Duplicated, Duplicated(x, v))[1] ≈ sum(cos.(x) .* x .+ sin.(x))
        dx = zero(x)
        value, seed, adjoints = sweep(f, "reverse", ("dup",), (NumbaArray(x),), (NumbaArray(dx),), 2.0)
        @test value ≈ sum(sin.(x) .* x)
        @test seed == 2.0 && adjoints == ()
        @test dx ≈ 2 .* (cos.(x) .* x .+ sin.(x))
        value, tangent, _ = sweep(f, "forward", ("dup",), (NumbaArray(x),), (NumbaArray(v),), 1.0)
        @test tangent ≈ sum(cos.(x) .* x .+ sin.(x))
    end

    @testset "a C-layout export refuses column-major data" begin
        # weighted was exported with layout A; the same IR declared C-contiguous must refuse a
        # column-major Matrix and accept row-major strides.
        abi = replace(read(joinpath(FIX, "pyjlad_weighted.json"), String), "\"layout\": \"A\"" => "\"layout\": \"C\"")
        f = load_ir(read(joinpath(FIX, "pyjlad_weighted.ll"), String), abi)
        a = reshape(collect(1.0:6.0), 2, 3)
        @test_throws ArgumentError f(a, 1.0)
        rowmajor = NumbaArray(vec(permutedims(a)), 0, (2, 3), (3, 1))
        @test f(rowmajor, 1.0) ≈ load("weighted")(a, 1.0)
    end

    @testset "Hessian-vector product" begin
        f = load("sin_loop")
        x = collect(range(0.1, 1.0; length=5))
        v = collect(1.0:5.0)
        @test hvp_exported(f, (x,), 1, v) ≈ (2 .* cos.(x) .- x .* sin.(x)) .* v
    end
end
