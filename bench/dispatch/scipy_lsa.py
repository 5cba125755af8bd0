#!/usr/bin/python3
"""Time scipy.optimize.linear_sum_assignment on the expanded k x k matrix
(the k x n cost matrix with each worker's column repeated m times), as the
ESD paper expands it for the Hungarian method. Usage:
    scipy_lsa.py MATRIX.bin K N REPS
MATRIX.bin holds k*n little-endian int64. Prints 'ms MEDIAN cost TOTAL'."""
import sys
import time

import numpy as np
from scipy.optimize import linear_sum_assignment


def main():
    path, k, n, reps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    c = np.fromfile(path, dtype='<i8').reshape(k, n)
    m = k // n
    times = []
    total = None
    for _ in range(reps):
        t0 = time.perf_counter()
        big = np.repeat(c, m, axis=1)  # k x k, column j*m+q is worker j
        rows, cols = linear_sum_assignment(big)
        times.append((time.perf_counter() - t0) * 1e3)
        total = int(c[rows, cols // m].sum())
    times.sort()
    print("ms %.3f cost %d" % (times[len(times) // 2], total))


if __name__ == "__main__":
    main()
