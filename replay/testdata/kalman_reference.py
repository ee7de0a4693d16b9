#!/usr/bin/python3
"""The Kalman load predictor's reference values for TestKalmanPredictor.

Dynamo's KalmanPredictor (components/src/dynamo/planner/utils/
load_predictor.py) over filterpy's KalmanFilter, written here with numpy
as filterpy computes them (predict: x = Fx, P = FPF' + Q; update: S = HPH'
+ R, K = PH' inv(S), x = x + K(z - Hx), P in Joseph's form), run over the
events of the test: "a V" adds V (nan for an interval with nothing
completed), "n" predicts. Prints one line per prediction, to full
precision. Needs numpy (apt-get install python3-numpy):

    /usr/bin/python3 replay/testdata/kalman_reference.py  (Debian's python3, which has it)
"""
import math

import numpy as np
from numpy import dot


class Filter:
    def __init__(self, q_level, q_trend, r):
        self.x = np.array([[0.0], [0.0]])
        self.F = np.array([[1.0, 1.0], [0.0, 1.0]])
        self.H = np.array([[1.0, 0.0]])
        self.P = np.eye(2) * 1000.0
        self.R = np.array([[max(1e-9, r)]])
        self.Q = np.array([[max(1e-12, q_level), 0.0], [0.0, max(1e-12, q_trend)]])
        self.I = np.eye(2)

    def predict(self):
        self.x = dot(self.F, self.x)
        self.P = 1.0 * dot(dot(self.F, self.P), self.F.T) + self.Q

    def update(self, z):
        z = np.array([[z]])
        y = z - dot(self.H, self.x)
        pht = dot(self.P, self.H.T)
        s = dot(self.H, pht) + self.R
        si = np.linalg.inv(s)
        k = dot(pht, si)
        self.x = self.x + dot(k, y)
        i_kh = self.I - dot(k, self.H)
        self.P = dot(dot(i_kh, self.P), i_kh.T) + dot(dot(k, self.R), k.T)


class Predictor:
    def __init__(self, log1p, q_level=1.0, q_trend=0.1, r=10.0):
        self.buf, self.seen = [], False
        self.log1p = log1p
        self.kf = Filter(q_level, q_trend, r)
        self.init, self.cached, self.pred = False, False, 0.0

    def add(self, v):
        if math.isnan(v):
            v = 0
        if v == 0 and not self.seen:
            return
        if v != 0:
            self.seen = True
        self.buf.append(v)
        z = math.log1p(max(0.0, float(v))) if self.log1p else float(v)
        if not self.init:
            self.kf.x = np.array([[z], [0.0]])
            self.init = True
        else:
            if not self.cached:
                self.kf.predict()
            self.kf.update(z)
        self.cached = False

    def next(self):
        if not self.init:
            return self.buf[-1] if self.buf else 0
        if not self.cached:
            self.kf.predict()
            self.pred = float(self.kf.x[0][0])
            self.cached = True
        return max(0.0, math.expm1(self.pred)) if self.log1p else self.pred


EVENTS = "n a0 a0 n anan a120 n a135 n n a160 a170 n a90 n a0 n anan n a400 a410 n a380 n a20 n"


def main():
    for log1p, params in ((False, {}), (True, {}), (False, dict(q_level=10.0, q_trend=1.0, r=5.0))):
        p = Predictor(log1p, **params)
        print("# log1p", log1p, params)
        for ev in EVENTS.split():
            if ev == "n":
                print(repr(float(p.next())))
            else:
                p.add(float(ev[1:]))


main()
