# A line-by-line model of the step loop of gpu/cuda.cu (passes A, B, C and
# the warp Bellman-Ford on packed (distance, hops, predecessor) keys, with
# random relaxation orders), checked for optimality against scipy's
# linear_sum_assignment on the expanded matrix: random, tied, one-worker
# and equal-row instances, k <= 40, n <= 8, random capacities. Keep it in
# step with cuda.cu. Exits 77 without numpy/scipy.
import sys
try:
    import numpy as np
    from scipy.optimize import linear_sum_assignment
except ImportError:
    print("SKIP: numpy/scipy missing", file=sys.stderr)
    sys.exit(77)
import random

INF = (1 << 64) - 1  # KEY_INF
BIAS = 1 << 48  # DIST_BIAS

def kernel(c,cap):
    k,n=c.shape
    assign=[int(np.argmin(c[r])) for r in range(k)]
    load=[0]*n
    for a in assign: load[a]+=1
    steps=0
    while any(load[j]!=cap[j] for j in range(n)):
        w=[[None]*n for _ in range(n)]
        for r in range(k):
            a=assign[r]
            for b in range(n):
                if b==a: continue
                d=int(c[r,b]-c[r,a])
                if w[a][b] is None or d<w[a][b]: w[a][b]=d
        key=[INF]*n
        for j in range(n):
            if load[j]>cap[j]: key[j]=(BIAS<<9)|j
        for rnd in range(n):
            changed=False
            edges=[(a,b) for a in range(n) for b in range(n)]
            random.shuffle(edges)
            for a,b in edges:
                ka=key[a]
                if a==b or ka==INF or w[a][b] is None: continue
                da=(ka>>9)+w[a][b]; hops=((ka>>4)&31)+1
                kb=(da<<9)|(hops<<4)|a
                if kb<key[b]: key[b]=kb; changed=True
            if not changed: break
        best=INF; dst=-1
        for j in range(n):
            if load[j]<cap[j] and key[j]<best: best=key[j]; dst=j
        assert dst>=0
        nxt=[-1]*n; src=dst
        for h in range(n+1):
            kk=key[src]
            if ((kk>>4)&31)==0: break
            p=kk&15; nxt[p]=src; src=p
        assert ((key[src]>>4)&31)==0
        cnt=[0]*n; slot=[-1]*k
        for r in range(k):
            a=assign[r]; b=nxt[a]
            if b>=0 and c[r,b]-c[r,a]==w[a][b]:
                slot[r]=cnt[a]; cnt[a]+=1
        f=min(load[src]-cap[src],cap[dst]-load[dst])
        a=src
        while a!=dst: f=min(f,cnt[a]); a=nxt[a]
        assert f>=1
        load[src]-=f; load[dst]+=f
        for r in range(k):
            if 0<=slot[r]<f: assign[r]=nxt[assign[r]]
        steps+=1
    return assign,steps
random.seed(1)
np.random.seed(1)
for trial in range(400):
    n=random.randint(1,8); k=random.randint(1,40)
    kind=trial%4
    if kind==0: c=np.random.randint(0,100,(k,n))
    elif kind==1: c=np.random.randint(0,3,(k,n))
    elif kind==2:
        c=np.random.randint(1000,6000,(k,n)); c[:,0]=np.random.randint(0,50,k)
    else: c=np.tile(np.random.randint(0,1000,n),(k,1))
    cap=[0]*n
    for r in range(k): cap[random.randrange(n)]+=1
    a,steps=kernel(c,cap)
    assert all(sum(1 for x in a if x==j)==cap[j] for j in range(n))
    cols=[j for j in range(n) for _ in range(cap[j])]
    big=c[:,cols]
    ri,ci=linear_sum_assignment(big)
    opt=big[ri,ci].sum()
    got=sum(int(c[r,a[r]]) for r in range(k))
    assert got==opt,(trial,got,opt)
print("ok")
