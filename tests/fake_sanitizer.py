#!/usr/bin/env python3
"""A stand-in for compute-sanitizer (no GPU): copies a recorded-style report to --log-file,
runs the wrapped command (so its stdout is the harness's answer) and exits like the real tool.

FAKE_SANITIZER_REPORT names the report file; FAKE_SANITIZER_ARGS (if set) is where the
arguments it got are written as JSON; FAKE_SANITIZER_ENV (if set) where its environment is written
as JSON; FAKE_SANITIZER_SLEEP makes it hang.
"""

import json
import os
import subprocess
import sys
import time

args = sys.argv[1:]
if os.environ.get("FAKE_SANITIZER_ARGS"):
    with open(os.environ["FAKE_SANITIZER_ARGS"], "w") as f:
        json.dump(args, f)
if os.environ.get("FAKE_SANITIZER_ENV"):
    with open(os.environ["FAKE_SANITIZER_ENV"], "w") as f:
        json.dump(dict(os.environ), f)
if os.environ.get("FAKE_SANITIZER_SLEEP"):
    time.sleep(float(os.environ["FAKE_SANITIZER_SLEEP"]))
opts, i = {}, 0
while args[i].startswith("--"):
    opts[args[i]] = args[i + 1]
    i += 2
child = subprocess.run(args[i:], check=False)
with open(os.environ["FAKE_SANITIZER_REPORT"]) as f:
    report = f.read()
with open(opts["--log-file"], "w") as f:
    f.write(report)
errors = "ERROR SUMMARY: 0 errors" not in report and "(0 errors" not in report
sys.exit(int(opts["--error-exitcode"]) if errors else child.returncode)
