import json, sys, numpy as np
d = json.load(open(sys.argv[1])); c = d['calls']
ar = [x for x in c if x['run'] == 'ar']
for n in sorted({x['run'] for x in c}, key=lambda n: [x['run'] for x in c].index(n)):
    cs = [x for x in c if x['run'] == n]
    print(f"{n:12s} steps {sum(x['steps'] for x in cs):5d} wall {sum(x['wall'] for x in cs):6.2f} step-median(med) {np.median([x['step_median'] for x in cs])*1e3:5.1f} ms  drafted {sum((x['drafted'] or 0) for x in cs):4d}  step/AR-step {np.median([m['step_median']/a['step_median'] for a, m in zip(ar, cs)]):.3f}")
