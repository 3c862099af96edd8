"""Issue 4's goals, counted from bench_ops.py results.json files: python3 docs/perf/h100/goals.py FILE...

A file may hold both ops (`gpu_check.sh bench`) or one (`--only linear`, `--only mlp`)."""
import json
import sys


def linear_goals(rows):
    fwd = [r for r in rows if r["mode"] == "fwd"]
    fb = [r for r in rows if r["mode"] == "fwd+bwd"]
    miss = [(r["label"], r["dtype"], round(r["hypatia_vs_best"], 3)) for r in fwd if r["hypatia_vs_best"] < 1.0]
    print(f"fwd >=1.0 best: {len(fwd)-len(miss)} of {len(fwd)}; misses {miss}")
    big = [r for r in fwd if r["dtype"] in ("bfloat16", "float16") and r["shape"]["M"] >= 1024]
    miss = [(r["label"], r["dtype"], round(r["hypatia_vs_eager"], 3)) for r in big if r["hypatia_vs_eager"] < 1.15]
    print(f"fwd >=1.15 eager bf16/fp16 M>=1024: {len(big)-len(miss)} of {len(big)}; misses {miss}")
    r = [r for r in fwd if r["label"].startswith("8192x4096") and r["dtype"] == "bfloat16"][0]
    print(f"8192x4096x4096 bf16 %floor: hyp {r['pct_of_floor'].get('hypatia'):.1f} addmm {r['pct_of_floor'].get('addmm_act'):.1f}")
    miss = [(r["label"], r["dtype"], round(r["hypatia_vs_best"], 3)) for r in fb if r["hypatia_vs_best"] < 1.0]
    print(f"fwd+bwd >=1.0 best: {len(fb)-len(miss)} of {len(fb)}; misses {miss}")
    miss = [(r["label"], r["dtype"], round(r["hypatia_vs_eager"], 3)) for r in fb if r["hypatia_vs_eager"] < 1.15]
    print(f"fwd+bwd >=1.15 eager: {len(fb)-len(miss)} of {len(fb)}; misses {miss}")


def mlp_goals(rows):
    for mode in ("fwd", "fwd+bwd"):
        m = [r for r in rows if r["mode"] == mode]
        miss = [(r["label"], r["dtype"], round(r["hypatia_vs_best"], 3)) for r in m if r["hypatia_vs_best"] < 1.0]
        print(f"mlp {mode} >=1.0 best: {len(m)-len(miss)} of {len(m)}; misses {miss}")
        narrow = [r for r in m if r["shape"].get("D", r["shape"].get("H")) == 64 and r["dtype"] in ("bfloat16", "float16")]
        for r in narrow:
            print(f"   narrow {r['label']} {r['dtype']} {mode}: {r['hypatia_vs_eager']:.2f}x eager, hyp {r['ms']['hypatia']*1e3:.1f} us, eager {r['ms']['eager']*1e3:.1f} us, {r['pct_of_floor'].get('hypatia', 0):.0f}% floor")


for path in sys.argv[1:]:
    rows = [r for r in json.load(open(path))["rows"] if r["status"] == "ok"]
    print("==", path)
    linear = [r for r in rows if r["op"] == "linear_relu"]
    mlp = [r for r in rows if r["op"] != "linear_relu"]
    if linear:
        linear_goals(linear)
    if mlp:
        mlp_goals(mlp)
