"""Analysis: pure functions over plain values. No database, no files, no processes, no TensorFlow.

Modules: ``stats`` (step-time comparisons with intervals), ``sequential`` (the sequential paired
gate's repeated confidence intervals), ``processes`` (the paired gate across fresh processes: the two-level
interval, its spread and design effect), ``calibration`` (drift prior, paired offset and gate noise from
past runs, given as values; the noise bounds), ``verdict`` (the final verdict), ``attribution`` (op self-time deltas
behind a step-time
change), ``diagnose`` (findings from a parsed profile), ``profile`` (the parsed profile's tables),
``environment`` (fingerprint hashes and diffs).

Rule: modules here import only ``tasks.records`` and ``tasks.analysis.*``.
"""
