# A step-by-step model of the solver in gpu/cuda.cu, run where there is no
# GPU: rows split over g blocks; per block the (min, count) of every worker
# pair; the global minima; Dijkstra on one warp over the reduced weights
# w(a, b) + pot[a] - pot[b] with packed (dist, worker) keys; f from the
# blocks' counts with each block's offset; the tied rows moved in a random
# order within each block; pot += min(dist, D); and the final check pass
# (every row at its least reduced cost, tight masks). Checked against
# scipy's linear_sum_assignment on the expanded matrix: random, tied,
# one-worker, equal-row and wide-range instances, k <= 48, n <= 8, random
# capacities, random block counts. Keep it in step with cuda.cu. Exits 77
# without numpy/scipy.
import sys
try:
    import numpy as np
    from scipy.optimize import linear_sum_assignment
except ImportError:
    print("SKIP: numpy/scipy missing", file=sys.stderr)
    sys.exit(77)
import random

INF = None


def block_partials(c, assign, rows, n):
    """scan: per pair (a, b) the least c[r][b] - c[r][a] over the block's
    rows at a, and how many rows reach it"""
    mn = {}
    for r in rows:
        a = assign[r]
        for b in range(n):
            if b == a:
                continue
            d = int(c[r, b] - c[r, a])
            m = mn.get((a, b))
            if m is None or d < m[0]:
                mn[(a, b)] = [d, 1]
            elif d == m[0]:
                m[1] += 1
    return mn


def dijkstra(w, pot, load, cap, n):
    """one warp: the nearest open worker by (dist << 6 | worker); stops at
    the first underloaded one"""
    dist = [0 if load[v] > cap[v] else INF for v in range(n)]
    pred, done = [-1] * n, [False] * n
    while True:
        keys = [(dist[v], v) for v in range(n) if not done[v] and dist[v] is not INF]
        if not keys:
            return None, dist, pred, 0
        d, u = min(keys)
        done[u] = True
        if load[u] < cap[u]:
            return u, dist, pred, d
        for v in range(n):
            if done[v] or w.get((u, v)) is None:
                continue
            red = w[(u, v)] + pot[u] - pot[v]
            assert red >= 0, "reduced weight < 0: pot is not a dual"
            nd = d + red
            if dist[v] is INF or nd < dist[v]:
                dist[v], pred[v] = nd, u


def kernel(c, cap, g):
    k, n = c.shape
    per = (k + g - 1) // g
    blocks = [range(min(k, x * per), min(k, x * per + per)) for x in range(g)]
    assign = [int(np.argmin(c[r])) for r in range(k)]
    load = [0] * n
    for a in assign:
        load[a] += 1
    pot = [0] * n
    steps = 0
    while True:
        parts = [block_partials(c, assign, rows, n) for rows in blocks]
        w = {}
        for p in parts:
            for e, (d, _) in p.items():
                if e not in w or d < w[e]:
                    w[e] = d
        if all(load[j] == cap[j] for j in range(n)):
            break
        dst, dist, pred, D = dijkstra(w, pot, load, cap, n)
        assert dst is not None, "no path"
        for v in range(n):
            pot[v] += D if dist[v] is INF or dist[v] > D else dist[v]
        nxt, src = {}, dst
        while pred[src] >= 0:
            nxt[pred[src]] = src
            src = pred[src]
        # f: excess, room, and per path edge the tied rows over all blocks
        tot, before = {}, []
        for a, b in nxt.items():
            t = 0
            for x, p in enumerate(parts):
                cnt = p[(a, b)][1] if (a, b) in p and p[(a, b)][0] == w[(a, b)] else 0
                before.append(((x, a), t))
                t += cnt
            tot[a] = t
        before = dict(before)
        f = min([load[src] - cap[src], cap[dst] - load[dst]] + list(tot.values()))
        assert f >= 1
        for x, rows in enumerate(blocks):
            rank = {a: 0 for a in nxt}
            order = list(rows)
            random.shuffle(order)  # shared-memory atomics: any order
            for r in order:
                a = assign[r]
                if a not in nxt:
                    continue
                b = nxt[a]
                if int(c[r, b] - c[r, a]) != w[(a, b)]:
                    continue
                if before[(x, a)] + rank[a] < f:
                    assign[r] = b
                rank[a] += 1
        load[src] -= f
        load[dst] += f
        steps += 1
    # the check pass: every row at its least reduced cost under pot
    for r in range(k):
        u = int(c[r, assign[r]]) - pot[assign[r]]
        assert all(int(c[r, b]) - pot[b] >= u for b in range(n)), "not optimal"
    return assign, steps


def expanded_opt(c, cap):
    cols = [j for j in range(c.shape[1]) for _ in range(cap[j])]
    m = c[:, cols]
    r, s = linear_sum_assignment(m)
    return int(m[r, s].sum())


def instance(rng, kind):
    n = rng.randint(2, 8)
    k = rng.randint(n, 48)
    cut = sorted(rng.randint(0, k) for _ in range(n - 1))
    cap = [b - a for a, b in zip([0] + cut, cut + [k])]
    if kind == "random":
        c = np.array([[rng.randint(0, 99) for _ in range(n)] for _ in range(k)])
    elif kind == "ties":
        c = np.array([[rng.randint(0, 2) for _ in range(n)] for _ in range(k)])
    elif kind == "one-worker":
        c = np.array([[rng.randint(0, 5) if j == 0 else 50 + rng.randint(0, 500)
                       for j in range(n)] for _ in range(k)])
    elif kind == "equal-rows":
        row = [rng.randint(0, 9) for _ in range(n)]
        c = np.array([row for _ in range(k)])
    else:  # wide: costs at both ends of the range
        c = np.array([[rng.choice([0, (1 << 44) - 1]) for _ in range(n)] for _ in range(k)],
                     dtype=object)
    return c, cap


def main():
    rng = random.Random(7)
    random.seed(11)
    done = 0
    for kind in ("random", "ties", "one-worker", "equal-rows", "wide"):
        for _ in range(80):
            c, cap = instance(rng, kind)
            g = rng.randint(1, 5)
            assign, _ = kernel(c, cap, g)
            load = [assign.count(j) for j in range(c.shape[1])]
            assert load == cap, (kind, load, cap)
            got = sum(int(c[r, assign[r]]) for r in range(c.shape[0]))
            want = expanded_opt(np.array(c, dtype=float) if kind == "wide" else c, cap)
            assert got == want, (kind, got, want)
            done += 1
    print("kernel model: %d instances optimal" % done)


main()
