# A Julia loss that integrates an ODE whose right-hand side is Numba code,
# differentiated end to end by Enzyme.jl.
#
#   .venv/bin/python -m pyjlad export pyjlad/julia_project/test/fixtures/functions.py:rhs \
#       --signature "float64, float64, float64" -o /tmp/rhs
#   julia --project=pyjlad/julia_project pyjlad/julia_project/examples/ode_loss.jl /tmp/rhs
using Enzyme, PyJlad

const dir = isempty(ARGS) ? joinpath(@__DIR__, "..", "test", "fixtures") : ARGS[1]
const rhs = load_exported(joinpath(dir, "pyjlad_rhs.ll"), joinpath(dir, "pyjlad_rhs.json"))

"Squared distance of the explicit-Euler solution of dx/dt = rhs(x, k, t) from data."
function loss(k, data)
    x, dt, s = 1.0, 0.01, 0.0
    for (step, target) in enumerate(data)
        x += dt * rhs(x, k, step * dt)
        s += (x - target)^2
    end
    return s
end

data = [exp(-0.5 * 0.01 * i) for i in 1:200]
k = 0.3
for iteration in 1:50
    global k
    dk = autodiff(Reverse, loss, Active, Active(k), Const(data))[1][1]
    k -= 0.05 * dk
end
println("fitted k = ", k, ", loss = ", loss(k, data))
