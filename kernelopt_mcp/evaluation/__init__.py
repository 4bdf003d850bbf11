"""Validating and timing a candidate: inputs, the harness process, comparison, statistics.

``evaluate`` runs a candidate through every case; ``harness`` talks to the native harness
(one process per GPU); ``harness_case`` builds one case's request and reads its answer;
``inputs`` / ``fresh_inputs`` / ``oracle`` make the inputs and expected outputs; ``compare``
and ``stats`` judge outputs and timings; ``calibrate`` / ``roofline`` / ``clocks`` put the
numbers in context; ``outcomes`` holds the result types; ``support_module`` compiles the
harness's own kernels (kernelopt_mcp/support/*.cu).

This ``__init__`` imports nothing, so importing one submodule does not import the rest.
"""
