"""The runner's modes, one module each, run in the runner's interpreter by ``tasks.runner.process``.

``probe`` (the environment facts, no TensorFlow import), ``warmup`` (steps until steady), ``profile``
(measured steps, then the profiled window) and ``paired`` (the A/B gate in ABBA blocks, fixed or in rounds).
Each returns its typed result (``tasks.runner.protocol``); the shared step building is ``tasks.runner.measure``.
"""
