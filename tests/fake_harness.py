#!/usr/bin/env python3
"""A stand-in for `kernelopt-harness serve` that needs no GPU, for testing the client's
process handling: deadlines, process-group kills, restarts after fatal exits, stderr caps.

The request's "entry" picks the behaviour: ok, hang, hang_child, crash, die, spam, flood,
garbage.
"""

import json
import os
import subprocess
import sys
import time

for line in sys.stdin:
    req = json.loads(line)
    entry = req.get("entry")
    answer = {"protocol": 1, "status": "ok", "error": None, "pid": os.getpid(), "cases": []}
    if entry == "hang":
        time.sleep(3600)
    elif entry == "hang_child":
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
        with open(req["module"], "w") as f:
            f.write(str(child.pid))
        time.sleep(3600)
    elif entry == "crash":
        answer["cases"] = [{"name": "c", "status": "runtime_error"}]
        print(json.dumps(answer), flush=True)
        sys.exit(5)
    elif entry == "die":
        sys.exit(3)
    elif entry == "spam":
        for _ in range(2000):
            sys.stderr.write("printf from a kernel " * 10 + "\n")
        sys.stderr.flush()
    elif entry == "flood":  # like a printf in every thread of a big grid: megabytes of stderr
        line = ("printf from a kernel " * 10 + "\n").encode()
        for _ in range(req.get("megabytes", 16) * 1024 * 1024 // len(line)):
            sys.stderr.buffer.write(line)
        sys.stderr.flush()
    elif entry == "garbage":
        print("this is not json", flush=True)
        continue
    print(json.dumps(answer), flush=True)
