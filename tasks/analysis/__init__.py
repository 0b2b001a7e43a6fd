"""Analysis: pure functions over plain values. No database, no files, no processes, no TensorFlow.

Modules: ``stats`` (step-time comparisons with intervals), ``calibration`` (drift prior and paired
offset from past runs, given as values), ``attribution`` (op self-time deltas behind a step-time
change), ``diagnose`` (findings from a parsed profile), ``profile`` (the parsed profile's tables),
``environment`` (fingerprint hashes and diffs).

Rule: modules here import only ``tasks.records`` and ``tasks.analysis.*``.
"""
