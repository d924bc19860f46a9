"""Host model of the Hopper backward's unit schedule for issue 39's mixed-varlen rows.

Units are (128-key block, sequence, KV head) in block_info.cuh's decode_unit order (L2 sections of
FC_BWD_SECTION_UNITS units, key block major inside a section). A unit of a sequence of L rows costs
its query steps (L / 64 non-causal; (L - 128 kb) / 64 causal, at 64-row steps) plus a fixed
`UNIT` steps (K/V load, epilogue); a unit past its sequence's keys costs `EMPTY`. Two schedules:
- persistent static (the plan for non-banded problems, varlen included): CTA c takes units
  c, c + 132, ...;
- one CTA per unit (banded problems): the next unit in order goes to the first SM that frees up
  (one CTA an SM: the step's shared memory).
The figure is the makespan over the ideal (all work / 132 SMs)."""
import heapq, math, sys

SMS, UNIT, EMPTY = 132, 1.0, 0.2
LENS = [4096, 512, 2048, 1024, 3072, 256, 1536, 2560]
H = 16


def units(lens, causal, section_units, order="plan"):
    n_kb = max(math.ceil(l / 128) for l in lens)
    heads = len(lens) * H
    out = []
    section_heads = min(heads, max(1, math.ceil(section_units / n_kb)))
    t = 0
    total = n_kb * heads
    while t < total:
        section = t // (section_heads * n_kb)
        first = section * section_heads
        here = min(section_heads, heads - first)
        r = t - section * section_heads * n_kb
        kb, bh = r // here, first + r % here
        L = lens[bh // H]
        if kb * 128 >= L:
            out.append(EMPTY)
        else:
            steps = (L - 128 * kb) / 64 if causal else L / 64
            out.append(steps + UNIT)
        t += 1
    if order == "longest":
        out.sort(reverse=True)
    return out


def persistent(costs):
    return max(sum(costs[c::SMS]) for c in range(SMS))


def greedy(costs):
    sms = [0.0] * SMS
    heapq.heapify(sms)
    for c in costs:
        heapq.heappush(sms, heapq.heappop(sms) + c)
    return max(sms)


def dense_twin(causal):
    s = round(math.sqrt(sum(l * l for l in LENS)))
    return units([s], causal, 66 if not causal else 198)


for causal in (False, True):
    su = 198 if causal else 66
    c = units(LENS, causal, su)
    ideal = sum(c) / SMS
    print(f"causal={causal}: work {sum(c):.0f} steps, ideal {ideal:.1f} a SM")
    if not causal:
        print(f"  persistent static, plan order: {persistent(c) / ideal:.3f}")
    print(f"  one CTA a unit, plan order:    {greedy(c) / ideal:.3f}")
    print(f"  one CTA a unit, longest first: {greedy(sorted(c, reverse=True)) / ideal:.3f}")
    d = dense_twin(causal)
    di = sum(d) / SMS
    sched = persistent(d) if not causal else greedy(d)
    print(f"  dense twin ({'persistent' if not causal else 'one CTA a unit'}): {sched / di:.3f}")
