"""Validating and timing a candidate: a prepared session, the harness and its protocol, the checks.

- ``session``: :class:`~.session.Session`, one workload on one device with its harness process,
  holding the record ``prepare`` made once (``prepared``: :class:`~.prepared.Prepared`, the
  inputs, expected outputs, the reference's timings, the support module); it builds candidates
  (``build``: compiled, entry point checked, launches resolved) and their requests.
- ``evaluate``: ``prepare(session)``, ``evaluate(session, candidate, options)`` and
  ``case_request(session, candidate, case, out_dir)`` (one case's request, for profiling,
  sanitizing and replay); ``runner`` runs a candidate's cases (validation, then timing).
- ``candidate``: :class:`~.candidate.Candidate` and :class:`~.candidate.EvaluateOptions`.
- ``protocol``: native_harness/PROTOCOL.md as pydantic models; ``harness``: the harness
  process (one per GPU, a deadline per request); ``harness_case``: one case's request and what
  its answer means.
- ``inputs`` / ``fresh_inputs`` / ``oracle``: inputs, device-drawn inputs and expected outputs;
  ``compare`` and ``stats``: outputs and timings judged; ``calibrate`` / ``roofline`` /
  ``clocks``: the numbers in context; ``outcomes``: the result types; ``support_module``: the
  harness's own kernels (kernelopt_mcp/support/*.cu).

This ``__init__`` imports nothing, so importing one submodule does not import the rest.
"""
