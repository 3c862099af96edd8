"""A model of the medium forward's ring protocol (ops/cuda/medium_mlp_kernel.cu with input-ring.patch):
one producer, two consumer groups, full/empty mbarriers with the hardware's parity test, TMA loads
that land in any order, the consumers' turns at the tensor cores. Random schedules, each with its own relative speeds of the agents and loads; reports a hang
(nobody can move) or a wait that passes on the wrong phase. Variants: 'v1' (each group alone frees
its input stage, the other waits for it without arriving: the version that hung on the H100), 'skip'
(the other group neither waits nor arrives), 'v2' (every warp waits for and frees every input
stage: input-ring.patch), 'v3' (as v2, a group's stages at a time: all waited for, then all freed:
input-ring-raw.patch), 'base' (112e604: no input in the ring).
Usage: ring_model.py [schedules per case]"""
import random
import sys


class Barrier:
    def __init__(self, count):
        self.count, self.pending, self.phase, self.tx = count, count, 0, 0  # phase: completed phases

    def arrive(self, n=1):
        self.pending -= n
        assert self.pending >= 0, "more arrivals than the barrier's count"
        self._maybe_complete()

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def passes(self, parity):  # mbarrier.try_wait.parity: the phase of that parity has completed
        return self.phase % 2 != parity


def programs(slices, halves, stages, input_stages, turns, blocks, variant):
    """Per agent, a list of steps: ('wait_full', pos) ... evaluated by run()."""
    prod, cons = [], {0: [], 1: []}
    pos = 0
    total_turns = sum(halves) * blocks
    turn = {0: 0, 1: 0}
    for b in range(blocks):
        if variant != "base":
            first = pos
            for g in (0, 1):
                for i in range(input_stages):
                    prod.append(("wait_empty", pos))
                    prod.append(("load", pos))
                    pos += 1
            for grp in (0, 1):
                p = first
                for g in (0, 1):
                    if variant == "v3":  # a group's stages at a time: wait for all, then free all
                        cons[grp] += [("wait_full", p + i) for i in range(input_stages)]
                        cons[grp] += [("arrive_empty", p + i, 4) for i in range(input_stages)]
                        p += input_stages
                        continue
                    for i in range(input_stages):
                        if variant == "skip" and g != grp:
                            pass  # neither waits for the other group's stage nor frees it
                        elif variant == "v1" and g != grp:
                            cons[grp].append(("wait_full", p))  # waits for it, does not free it
                        else:
                            cons[grp].append(("wait_full", p))
                            cons[grp].append(("arrive_empty", p, 8 if variant in ("v1", "skip") else 4))
                        p += 1
        layer_start = pos
        for grp in (0, 1):
            p = layer_start
            for l, (sl, hv) in enumerate(zip(slices, halves)):
                for h in range(hv):
                    if turns and (grp == 1 or turn[grp] > 0):
                        cons[grp].append(("wait_turn",))
                    prev = None
                    for s in range(sl):
                        cons[grp].append(("wait_full", p))
                        if prev is not None:
                            cons[grp].append(("arrive_empty", prev, 4))
                        prev = p
                        p += 1
                    if turns and (grp == 0 or turn[grp] + 1 < total_turns):
                        cons[grp].append(("pass_turn",))
                    turn[grp] += 1
                    cons[grp].append(("arrive_empty", prev, 4))
        for l, (sl, hv) in enumerate(zip(slices, halves)):
            for h in range(hv):
                for s in range(sl):
                    prod.append(("wait_empty", pos))
                    prod.append(("load", pos))
                    pos += 1
    return prod, cons[0], cons[1]


def run(case, variant, seed):
    slices, halves, stages, input_stages, turns, blocks = case
    rng = random.Random(seed)
    full = [Barrier(1) for _ in range(stages)]
    empty = [Barrier(8) for _ in range(stages)]
    agents = dict(zip(("producer", "group0", "group1"), programs(*case, variant)))
    at = {a: 0 for a in agents}
    token = {0: 0, 1: 0}
    in_flight = []  # loads issued, not landed: positions
    # Each schedule its own speeds: an agent's (or a load's) chance to move next.
    speed = {k: rng.choice([0.05, 0.3, 1.0, 3.0]) for k in ("producer", "group0", "group1", "land")}
    while True:
        moves = []
        for a, prog in agents.items():
            if at[a] == len(prog):
                continue
            step = prog[at[a]]
            kind = step[0]
            if kind == "wait_full":
                pos = step[1]
                if not full[pos % stages].passes((pos // stages) % 2):
                    continue
            elif kind == "wait_empty":
                pos = step[1]
                if not empty[pos % stages].passes((pos // stages) % 2 ^ 1):
                    continue
            elif kind == "wait_turn":
                if token[int(a[-1])] == 0:
                    continue
            moves.append(a)
        moves += [("land", i) for i in range(len(in_flight))]
        if not moves:
            if all(at[a] == len(p) for a, p in agents.items()):
                return "ok"
            return "hang: " + ", ".join(f"{a} at {agents[a][at[a]]}" for a in agents if at[a] < len(agents[a]))
        move = rng.choices(moves, [speed["land" if isinstance(m, tuple) else m] for m in moves])[0]
        if isinstance(move, tuple):
            pos = in_flight.pop(move[1])
            bar = full[pos % stages]
            bar.tx = 0
            bar._maybe_complete()
            continue
        step = agents[move][at[move]]
        kind = step[0]
        if kind == "wait_full":
            pos = step[1]
            lap = pos // stages
            if full[pos % stages].phase != lap + 1:
                return f"{move} passed the full wait of position {pos} on phase {full[pos % stages].phase}, not {lap + 1}"
        elif kind == "wait_empty":
            pos = step[1]
            lap = pos // stages
            if empty[pos % stages].phase != lap:
                return f"producer passed the empty wait of position {pos} on phase {empty[pos % stages].phase}, not {lap}"
        elif kind == "load":
            bar = full[step[1] % stages]
            bar.tx = 1  # the bytes still to land
            bar.arrive()
            in_flight.append(step[1])
        elif kind == "arrive_empty":
            empty[step[1] % stages].arrive(step[2])
        elif kind == "pass_turn":
            token[1 - int(move[-1])] += 1
        elif kind == "wait_turn":
            token[int(move[-1])] -= 1
        at[move] += 1


# (slices a layer, halves a layer, ring stages, input stages a group, turns, blocks a CTA)
CASES = {
    "mlp-256x4 (256-256-256-256-64)": ([4, 4, 4, 4], [1, 1, 1, 1], 5, 1, True, 3),
    "16-256-256-64": ([1, 4, 4], [1, 1, 1], 5, 1, True, 3),
    "256-256-64": ([4, 4], [1, 1], 5, 1, True, 4),
    "512-256-64 (512-wide input: 2 input stages a group, ring of 3)": ([8, 4], [1, 1], 3, 2, False, 3),
    "256-512-256 (a 512-wide layer, ring of 3)": ([4, 8], [2, 1], 3, 1, False, 3),
    "dlrm-bottom 13-512-256-64 (raw input, ring of 3)": ([1, 8, 4], [2, 1, 1], 3, 1, False, 3),
    "512-256-64, ring of 2": ([8, 4], [1, 1], 2, 2, False, 3),
    "64 x 9": ([1] * 8, [1] * 8, 5, 1, True, 3),
}
n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
for name, case in CASES.items():
    for variant in ("base", "skip", "v1", "v2", "v3"):
        results = {}
        for seed in range(n):
            r = run(case, variant, seed)
            key = r[:110]
            results[key] = results.get(key, 0) + 1
        summary = "; ".join(f"{k} x{v}" for k, v in sorted(results.items(), key=lambda kv: -kv[1])[:3])
        print(f"{name:62s} {variant:4s} {summary}", flush=True)
