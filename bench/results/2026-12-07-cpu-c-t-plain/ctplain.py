"""The planner's c_T against its plain steps in a `bench/plan_trace.py` trace: c_T as each full plan read it,
and the whole time of each plain step (not the first three after a drafting step, which run slow).

    python ctplain.py TRACE.txt
"""
import sys

import numpy as np

c_t, plain, run = [], [], 0
for line in open(sys.argv[1]):
    f = line.split()
    if f and f[0] == "plan":
        c_t.append(float(f[14]))
    elif f and f[0] == "step":
        if float(f[5]) == 1 and int(f[6]) == 1:
            run += 1
            if run > 3:
                plain.append(float(f[1]))
        else:
            run = 0
for name, x in (("c_T at the plans", c_t), ("plain steps (4th on)", plain)):
    x = np.array(x)
    print(f"{name:22s} n {len(x):4d}  p10 {np.percentile(x, 10):5.2f}  median {np.median(x):5.2f}  p90 {np.percentile(x, 90):5.2f} ms")
