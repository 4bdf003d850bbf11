"""A result's status, in one table: each member's value, severity, meaning and cheat verdict.

Everything said about a status is said here, once (httpx's ``codes``): the evaluation picks the
most serious status of its cases by ``severity``, the tools' manual quotes ``meaning``, and the
orchestrator tells a model that a ``cheat`` verdict rejects the idea itself rather than a slip in
carrying it out. The module is part of the data layer so that the orchestrator, which may import
only that layer, reads the same table as the library.
"""

from __future__ import annotations

from enum import StrEnum


# Each member is (value, severity, meaning, cheat): severity 0 is the most serious (when cases fail
# differently, the overall status is the most serious one); cheat is, for a verdict that rejects the
# optimization idea itself, what it says the kernel did (None otherwise). The class carries no
# docstring on purpose: pydantic would copy it into every tool's output schema.
class Status(StrEnum):
    severity: int
    meaning: str
    cheat: str | None

    def __new__(cls, value: str, severity: int, meaning: str, cheat: str | None = None) -> Status:
        member = str.__new__(cls, value)
        member._value_ = value
        member.severity = severity
        member.meaning = meaning
        member.cheat = cheat
        return member

    ok = "ok", 13, "every case passed every check that ran"
    compile_error = "compile_error", 0, "the source does not compile, or the module has no usable entry point"
    invalid_launch = (
        "invalid_launch", 6, "the launch configuration was refused (block size, shared memory, resources)"
    )
    runtime_error = "runtime_error", 1, "the kernel faulted (illegal address, trap, misaligned access)"
    timeout = (
        "timeout", 2, "no answer within the deadline (an infinite loop or a deadlock); the harness was killed"
    )
    mismatch = "mismatch", 8, "outputs differ from the expected ones beyond the tolerance"
    out_of_bounds_write = "out_of_bounds_write", 3, "the kernel wrote into the guard bytes around a buffer"
    input_modified = (
        "input_modified", 4, "the kernel wrote into an input buffer",
        "it wrote into an input buffer: inputs are read-only (neither scratch space nor a place to leave results for a "
        "later launch).",
    )
    nondeterministic = (
        "nondeterministic", 9, "a second launch on the same inputs gave different outputs (a race?)",
        "two launches on the same inputs gave different outputs: a race (a missing __syncthreads or atomic, unordered "
        "writes to one location) or a read of uninitialised memory; such a kernel is right only by luck.",
    )
    timed_mismatch = (
        "timed_mismatch", 7,
        "the outputs of the timed launches, run on inputs drawn from a hidden seed, are wrong "
        "(results cached across launches, or work skipped while timed)",
        "the outputs of its timed launches were wrong on inputs it had not seen before, while the validation launches "
        "passed: results are cached or reused across launches (keyed on input values, pointers or a launch count), or "
        "work is skipped while it is timed (warm-up or back-to-back launch detection).",
    )
    inconsistent_timing = (
        "inconsistent_timing", 10,
        "launches on inputs the kernel had not seen were much slower than the timed median, twice, "
        "beyond the measured noise: the timed launches were faster for a reason other than the work "
        "(results reused from inputs seen before, or work skipped while timed)",
        "a launch on inputs it had not seen was much slower than its timed launches: its speed depends on having seen "
        "the inputs before (a result cache, or work skipped on repeated launches).",
    )
    impossible_time = (
        "impossible_time", 11,
        "measured faster than the device's roofline allows for the work the case requires: the "
        "kernel skips work",
        "it was timed faster than the device's memory bandwidth and compute peak allow for the work every correct "
        "kernel must do: it skips work while timed (or reuses results across launches).",
    )
    sanitizer_error = (
        "sanitizer_error", 5, "compute-sanitizer found memory errors, races or uninitialised reads"
    )
    skipped = "skipped", 12, "not run, because an earlier case ended the harness process"

    @property
    def is_cheat(self) -> bool:
        """Whether the verdict rejects the optimization idea itself, not a slip in carrying it out."""
        return self.cheat is not None


#: What each failing status means, in declaration order, for messages and the model's manual.
STATUS_MEANING: dict[Status, str] = {s: s.meaning for s in Status if s is not Status.ok}

#: The cheat verdicts by value, with what each says the kernel did.
CHEATS: dict[str, str] = {s.value: s.cheat for s in Status if s.cheat is not None}
