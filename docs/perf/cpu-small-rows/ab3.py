import json, os, sys
exec(open("/tmp/ab/ab.py").read().split("for widths in")[0])
for widths in ([13, 512, 256, 64],):
    dt = torch.float32
    for rows in (1, 16, 64):
        x = torch.randn(rows, widths[0]).to(dt).requires_grad_()
        ws = [(torch.randn(o, i) / i**0.5).to(dt).requires_grad_() for i, o in zip(widths, widths[1:])]
        bs = [torch.zeros(o, dtype=dt, requires_grad=True) for o in widths[1:]]
        for train in (False, True):
            e = timed(eager, x, ws, bs, train); h = timed(hyp, x, ws, bs, train)
            print(json.dumps(dict(lib=lib, widths="-".join(map(str, widths)), dtype="float32", rows=rows,
                                  mode="train" if train else "infer", eager=e, hyp=h)), flush=True)
