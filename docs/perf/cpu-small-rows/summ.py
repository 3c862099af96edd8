import json, sys, os, statistics as st, collections
NEW = os.environ.get("NEW", "new")
d = collections.defaultdict(lambda: collections.defaultdict(list))
for f in sys.argv[1:]:
    for l in open(f):
        r = json.loads(l); k = (r["widths"], r["dtype"], r["rows"], r["mode"])
        d[k][r["lib"]].append(r["hyp"]); d[k]["eager"].append(r["eager"])
print("| widths | dtype | rows | mode | eager µs | old µs | new µs | new/old | eager/new |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for k, v in d.items():
    e, o, n = st.median(v["eager"]), st.median(v["old"]), st.median(v[NEW])
    flag = " **" if abs(n/o-1) > 0.05 else ""
    print(f"| {k[0]} | {k[1]} | {k[2]} | {k[3]} | {e:.1f} | {o:.1f} | {n:.1f} | {n/o:.2f}{flag} | {e/n:.2f} |")
