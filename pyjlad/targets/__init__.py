"""Targets: where a portable module goes besides the embedded engine's Enzyme, one module each.

* :mod:`pyjlad.targets.llvmcall`: the text Julia's ``Base.llvmcall`` receives (the Julia engine,
  :mod:`pyjlad.engines.julia`), the ``llvmcall`` pipeline.
* :mod:`pyjlad.targets.nvptx`: the module retargeted to NVPTX for CUDA.jl kernels
  (``python -m pyjlad export --target nvptx``), the ``nvptx`` pipeline.

Each is a :class:`pyjlad.ir.pipeline.Pipeline` of module passes over a parsed
:class:`pyjlad.ir.Module`.
"""
