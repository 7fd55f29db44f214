"""Min-of-N in-process breakdown: NoLineage / SubZero / SubZeroPaper alternated (local executor).

Usage: PYTHONPATH=<code> python breakdown.py ROUNDS OUT.json WORKLOAD.json, where WORKLOAD.json is
the astronomy bench's entire-array queries (the capture bench writes it as workload.json).
"""
import json, shutil, sys, time, collections
from subzero import execution as E
from subzero.optimizer import calibrate as C, plan as P
from subzero_bench import astronomy as A
from subzero.workflows import astronomy as workflow
T = collections.defaultdict(float)
def wrap(mod, name, keyf):
    f = getattr(mod, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[keyf(a)] += time.perf_counter() - t; return r
    setattr(mod, name, g)
wrap(E._Execution, "compute", lambda a: "compute " + (a[1].name if a[1].name in ("clean", "stars", "crmask_1", "crmask_2") else "other nodes"))
wrap(E._Execution, "commit", lambda a: "commit (manifests, catalog)")
wrap(C, "profile_node", lambda a: "calibration " + (a[0].node if a[0].node in ("clean", "stars") else "mapping nodes (fans)"))
wrap(P, "optimize", lambda a: "integer program (build + solve)")
wf, inputs = workflow.build(quick=False)
rounds = int(sys.argv[1])
res = collections.defaultdict(list)
for k in range(rounds):
    for config in ("NoLineage", "SubZero", "SubZeroPaper"):
        pins = A.pins(wf, config, True)
        options = {"strategies": pins}
        if pins is None:
            options.update(workload=json.load(open(sys.argv[3])), max_disk=A.DISK_BUDGET, max_runtime="1.15x")
        store = f"{sys.argv[2]}.{config}.store"
        shutil.rmtree(store, ignore_errors=True)
        T.clear()
        t = time.perf_counter()
        run = wf.run(inputs, store=store, executor="local", **options)
        wall = time.perf_counter() - t
        plan = {n: list(r.strategies) for n, r in run.catalog.nodes.items() if r.strategies and any(s not in ("Map", "BlackBox") for s in r.strategies)}
        res[config].append((wall, dict(T), json.dumps(plan, sort_keys=True)))
out = {}
for config, rs in res.items():
    walls = sorted(r[0] for r in rs)
    keys = sorted({k for r in rs for k in r[1]})
    comp = {k: min(r[1].get(k, 0.0) for r in rs) for k in keys}
    out[config] = {"wall_min": walls[0], "wall_median": walls[len(walls) // 2], "components_min": comp,
                   "plans": sorted({r[2] for r in rs})}
    print(config, round(walls[0], 3), round(walls[len(walls) // 2], 3), {k: round(v, 3) for k, v in comp.items()}, out[config]["plans"])
json.dump(out, open(sys.argv[2], "w"), indent=1)
