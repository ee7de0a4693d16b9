#!/usr/bin/env python3
"""gen.py writes vectors.json: small vectors and what numpy computes of them,
for analyze's TestNumpyVectors, which checks analyze's mean, standard
deviation, median and percentiles against these figures to the last bit
without ../shared.

Regenerate (Debian's python3-numpy; numpy 1.24.2 made the committed file):

    /usr/bin/python3 analyze/testdata/numpy/gen.py > analyze/testdata/numpy/vectors.json

Every vector is in generation order (numpy's pairwise sum depends on the
order); floats are written with repr, which round-trips exactly.
"""
import json
import math

import numpy as np

rng = np.random.default_rng(20261201)

# Percentiles vLLM and the reports print, and ones whose interpolation
# fraction (n-1)*p/100 - floor(...) falls below and above 0.5 for every n
# below (numpy's _lerp switches formulas at 0.5).
PERCENTILES = [0, 1, 5, 10, 25, 33.3, 50, 66.7, 75, 90, 95, 99, 99.9, 100,
               2.5, 17.5, 42.1, 58.9, 83.3, 97.5]


def shapes(n):
    # Latencies: lognormal seconds, as TTFTs and E2Es are.
    yield "latency", rng.lognormal(mean=-1.0, sigma=1.5, size=n)
    # Inter-token gaps: a few step times repeated, plus jitter.
    steps = np.array([0.0123, 0.0125, 0.0131, 0.02, 0.35])
    yield "itl", steps[rng.integers(0, len(steps), size=n)] + rng.uniform(0, 1e-4, size=n)
    # Wide: magnitudes from 1e-6 to 1e6, where the order of a sum shows.
    yield "wide", rng.standard_normal(n) * 10.0 ** rng.integers(-6, 7, size=n)


vectors = []
for n in (7, 8, 128, 129, 1000):
    for shape, x in shapes(n):
        x = np.asarray(x, dtype=np.float64)
        vectors.append({
            "name": f"{shape}-{n}",
            "values": [float(v) for v in x],
            "mean": float(np.mean(x)),
            "std": float(np.std(x)),
            "median": float(np.median(x)),
            "percentiles": [
                {"p": p, "fraction": (n - 1) * (p / 100) - math.floor((n - 1) * (p / 100)),
                 "value": float(np.percentile(x, p))}
                for p in PERCENTILES
            ],
        })

json.dump({"numpy": np.__version__, "vectors": vectors}, __import__("sys").stdout, indent=1)
print()
