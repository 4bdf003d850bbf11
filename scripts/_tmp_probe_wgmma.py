import sys
from pathlib import Path
sys.path.insert(0, "tests/workloads")
from test_tunable_kernels import concrete_launch, load_tunable, options_for
from kernelopt_mcp import Candidate, EvaluateOptions, HarnessProcess, Session, Settings
from kernelopt_mcp.config import find_workload
from kernelopt_mcp.evaluation.device import device_info
from kernelopt_mcp.evaluation.evaluate import evaluate, prepare
import os
h = Path(os.environ["KERNELOPT_HARNESS"])
wl = find_workload("attention_fwd", Settings())
for spec, config in (("tunable_wgmma.json", {"NWG": 2, "BKV": 128, "STAGES": 3}),
                     ("tunable_tma.json", {"NWG": 2, "BKV": 64, "STAGES": 2, "OVERLAP": 1, "NWG64": 3, "BKV64": 128})):
    t = load_tunable("attention_fwd", spec)
    cfg = {**t.spec["defaults"], **config}
    with HarnessProcess(h, 0) as proc, Session(wl, proc, device_info(h, 0), workdir=Path(f"/tmp/pw-{spec}"),
                                              options=EvaluateOptions(warmup=3, iterations=20, timeout_s=120)) as ev:
        prepare(ev, time_reference=True)
        for rep in range(int(sys.argv[1]) if len(sys.argv) > 1 else 3):
            r = evaluate(ev, Candidate(t.source, concrete_launch(t.spec, cfg), options_for(t.spec, cfg), name="p"))
            print(spec, rep, r.status.value, r.message[:200])
            for c in r.cases:
                for o in [*c.outputs, *c.timed_check]:
                    if not o.passed:
                        print("  ", c.name, o.name, o.mismatches, o.max_abs_error, o.rtol, o.atol, o.scale,
                              [m.model_dump() for m in o.first_mismatches][:3])
                for rc in c.reference_checks:
                    if rc.get("mismatches"):
                        print("   refcheck", c.name, {k: v for k, v in rc.items() if k != "first_mismatches"},
                              rc.get("first_mismatches", [])[:3])
