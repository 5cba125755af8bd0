#!/usr/bin/env python3
"""Writes the seed corpus of the BARRIER / PUSH sequence fuzz target
(corpus_push_barrier/): scripts of honest iterations and of each way a
daemon can break the rule (a gap, a re-send, a wrong barrier count, a
rollback, a new link, two links of one worker, a corrupted frame). The
script format is in fuzz_push_barrier.c.
Run from this folder: ./make_push_barrier_corpus.py"""
import os

out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus_push_barrier")
os.makedirs(out, exist_ok=True)

VALUE, GRAD, BARRIER, HELLO, ROLLBACK, GRAD0, CLOSE = 0, 2, 3, 4, 5, 6, 7
LIE, CORRUPT, WORKER = 0x20, 0x40, 0x80


def op(link, act, flags=0, *extra):
    return bytes([link | act << 2 | flags, *extra])


def push(link, rows=1):
    return op(link, VALUE, 0, rows)


def grad(link, rows=1):
    return op(link, GRAD, 0, rows)


def hellos(n=3):
    return b"".join(op(i, HELLO) for i in range(n))


def iteration(pushes=2):
    s = b""
    for w in range(3):
        s += b"".join(push(w, i) for i in range(pushes)) + grad(w) + op(w, BARRIER)
    return s


seeds = {
    "honest_iterations": hellos() + iteration() + iteration(1) + iteration(3),
    "unnumbered_grads": hellos() + op(0, GRAD0, 0, 0) + push(0) + op(0, GRAD0, 0, 2) +
    op(0, BARRIER),
    # lie mode 0: the next + extra byte (a gap)
    "push_gap": hellos(1) + push(0) + op(0, VALUE, LIE, 0, 3, 0, 1),
    # lie mode 1: sent - 1 (a re-send)
    "push_resent": hellos(1) + push(0) + push(0) + op(0, VALUE, LIE, 1, 1, 0, 1),
    "push_unnumbered": hellos(1) + op(0, VALUE, LIE, 2, 0, 1) + op(0, BARRIER),
    "push_huge": hellos(1) + op(0, VALUE, LIE, 3, *b"\xff" * 8, 0, 1) + push(0),
    "push_wrong_worker": hellos(2) + op(0, GRAD, LIE, 0, 0, 1, 1, 0, 1),
    "push_old_iteration": hellos(3) + iteration() + op(1, GRAD, LIE, 0, 0, 1, 1, 0xff, 1),
    # barrier lie: mode, npushes delta, [iteration delta], [worker]
    "barrier_count_high": hellos(1) + push(0) + op(0, BARRIER, LIE, 0, 1),
    "barrier_count_low": hellos(1) + push(0) + push(0) + op(0, BARRIER, LIE, 0, 0xff),
    "barrier_iteration": hellos(1) + op(0, BARRIER, LIE, 1, 0, 2),
    "barrier_worker_flags": hellos(2) + op(1, BARRIER, LIE, 0x1e, 0, 0),
    "barrier_before_hello": op(0, BARRIER) + op(0, HELLO) + op(0, BARRIER),
    "rollback_stale": hellos() + push(0) + op(1, ROLLBACK, LIE, 0, 0) +
    op(1, ROLLBACK, LIE, 0, 2) + push(0) + op(0, BARRIER) + op(0, ROLLBACK) + push(0) +
    op(0, BARRIER) + push(1) + op(1, BARRIER) + op(2, ROLLBACK) + op(2, BARRIER),
    "relink": hellos(1) + push(0) + push(0) + op(0, CLOSE) + op(3, HELLO) + push(3) +
    op(3, BARRIER),
    "shared_worker": hellos(1) + push(0) + op(3, HELLO) + push(3) + push(0) + op(0, BARRIER),
    "hello_worker_byte": op(0, HELLO, WORKER, 2) + op(1, HELLO, WORKER, 3) + push(0) +
    op(0, BARRIER),
    "hello_refused": op(0, HELLO, LIE, 1) + op(1, HELLO, LIE, 2) + op(2, HELLO, LIE, 4) +
    push(0),
    # corrupt: offset, xor
    "corrupt_push_seq": hellos(1) + op(0, VALUE, CORRUPT, 0, 32, 1) + push(0),
    "corrupt_barrier_count": hellos(1) + push(0) + op(0, BARRIER, CORRUPT, 44, 1),
    "corrupt_header": hellos(1) + op(0, VALUE, CORRUPT, 0, 8, 4) + op(0, BARRIER),
}
for name, data in seeds.items():
    with open(os.path.join(out, name), "wb") as f:
        f.write(data)
print("wrote %d seeds to %s" % (len(seeds), out))
