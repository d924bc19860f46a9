"""What the causal mixed-varlen row's 1.35× (D = 128) needs from the costs the schedule model leaves
free, with the costs measured on 2026-12-02 (docs/results/2026-12-02-hopper-bwd-grid-h200).

varlen_order.py's units and one-CTA-a-unit schedule, in units of one 64-row step of the modes build
(2.84 µs at D = 128 in call 1's unit timeline):
- UNIT: a unit's cost outside its steps, 3.5-4.5 µs in the same timeline: 1.4 steps;
- STEP: the dense twin's step against the modes build's, from the equal-length causal row
  (8 × 2048, 1.04× its dense twin in call 3, same units and order on both sides): 1 / 1.04;
- EMPTY: a CTA whose unit is past its sequence's keys, never measured: swept.
The ratio is the row's makespan over its twin's, both with their own plan's sections, as
bench-all's bwd-modes ratio is (equal visible pairs)."""
import contextlib
import io

with contextlib.redirect_stdout(io.StringIO()):  # (varlen_order prints its own study on import)
    import varlen_order as vo

UNIT, STEP = 1.4, 1 / 1.04
vo.UNIT = UNIT


def ratio(empty):
    vo.EMPTY = empty
    mode = vo.greedy(vo.units(vo.LENS, True, 198))
    # The twin's units all have keys: steps at the dense step's cost, plus UNIT.
    twin = vo.greedy([(c - UNIT) * STEP + UNIT for c in vo.dense_twin(True)])
    return mode / twin


print(f"UNIT {UNIT} steps, twin step {STEP:.3f}")
for empty in (0.0, 0.5, 1.0, 2.0, 4.0):
    print(f"  EMPTY {empty:.1f} steps ({empty * 2.84:.1f} µs): predicted ratio {ratio(empty):.3f}")
lo, hi = 0.0, 50.0
for _ in range(40):
    mid = (lo + hi) / 2
    lo, hi = (mid, hi) if ratio(mid) < 1.35 else (lo, mid)
print(f"  the measured 1.35 needs EMPTY = {lo:.1f} steps ({lo * 2.84:.1f} µs a CTA)")
