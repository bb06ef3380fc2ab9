"""Static memory plans over a liveness table: where every intermediate tensor of `main` lives.

A plan is a list of storages (blocks of bytes, each on one device) and, for every planned
tensor, a storage and a byte offset in it. Three planners:

- `greedy-by-size` (Pisarchyk & Lee 2020): one arena per device; tensors largest first, each at
  the lowest aligned offset that is free over its whole live range, then, while above the bound,
  a bounded repair of the order (`repair_order`). With `in_place`, an element-wise step writes its
  result over a same-shaped input that dies at that step, so the two share one buffer; with
  `concat_in_place`, the inputs of a concatenation are placed in their slices of its result, so
  the concatenation copies nothing. Both can beat the plain liveness lower bound; each is kept
  only where it makes the arena smaller or equal.
- `greedy-best`: the same placement and repair in four orders (largest, largest size x lifetime,
  longest-lived first, and first the buffers live where the most bytes are), keeping the
  smallest arena, then a short seeded local search over the order while above the bound.
- `tvm-greedy`: TVM's GraphPlanMemory token allocator: parameters and
  constants get storages never reused; each step output requests a free storage (smallest in
  [S, 16 S], else the largest in [S/16, S), which grows), else a new one.
- `none`: AOT's on-demand allocator, every tensor its own storage.

All planners are iterative and near-linear in the number of steps for graphs whose live sets
are small (the usual case); greedy-by-size looks only at tensors whose ranges meet.
"""

from __future__ import annotations

import bisect
import itertools
import random
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from irtool.analysis.steps import ALIAS, CALL, CONSTANT, PARAM, Device, Liveness, device_key
from irtool.core.diagnostics import DiagnosticError

ARENA, TOKEN, INPUT = "arena", "token", "input"


@dataclass
class Storage:
    index: int
    device: Device
    nbytes: int  # bytes the storage must hold
    kind: str  # ARENA (offset-planned), TOKEN (one tensor at a time) or INPUT (a parameter/constant)
    first_bytes: int = 0  # size of the first tensor placed in it (what TVM's StorageInfo reports)


@dataclass
class MemoryPlan:
    algorithm: str
    alignment: int
    storages: list[Storage] = field(default_factory=list)
    # tensor index -> (storage index, byte offset); planned tensors, plus inputs for tvm-greedy
    placement: dict[int, tuple[int, int]] = field(default_factory=dict)
    # The overlaps the plan intends (written on `main`; the checker allows no others): an
    # element-wise result over a dying input, a concatenation's inputs in their slices of it.
    in_place: bool = False
    concat_in_place: bool = False
    # `main`'s results that steps compute are written straight into the caller's buffers (code
    # generation's ABI): they take no workspace, and their storage attributes are not used.
    results_outside: bool = False

    def workspace_bytes(self) -> int:
        """Bytes of all storages that hold intermediate tensors (inputs excluded)."""
        return sum(s.nbytes for s in self.storages if s.kind != INPUT)

    def total_bytes(self) -> int:
        """Every storage, inputs included (how TVM's graph executor counts a plan)."""
        return sum(s.nbytes for s in self.storages)


def align_up(n: int, alignment: int) -> int:
    return -(-n // alignment) * alignment


# ---------------------------------------------------------------------------------------------
# none


def plan_none(live: Liveness, alignment: int = 64) -> MemoryPlan:
    plan = MemoryPlan("none", alignment)
    for t in live.planned():
        storage = Storage(len(plan.storages), t.device, t.nbytes, TOKEN, t.nbytes)
        plan.storages.append(storage)
        plan.placement[t.index] = (storage.index, 0)
    return plan


# ---------------------------------------------------------------------------------------------
# tvm-greedy


class _FreeList:
    """Free storages keyed by their byte size (a multimap: equal keys keep insertion order)."""

    def __init__(self) -> None:
        self.keys: list[tuple[int, int]] = []
        self.items: dict[tuple[int, int], int] = {}
        self.counter = itertools.count()

    def insert(self, nbytes: int, storage: int) -> None:
        key = (nbytes, next(self.counter))
        bisect.insort(self.keys, key)
        self.items[key] = storage

    def take(self, size: int, fits: Callable[[int], bool]) -> tuple[int, int] | None:
        """(storage, its size) chosen by TVM's rule, removed from the list; None when nothing fits."""
        begin = bisect.bisect_left(self.keys, (size // 16, -1))
        mid = bisect.bisect_left(self.keys, (size, -1))
        end = bisect.bisect_left(self.keys, (size * 16 + 1, -1))
        candidates = itertools.chain(range(mid, end), range(mid - 1, begin - 1, -1))
        for i in candidates:
            key = self.keys[i]
            if fits(self.items[key]):
                del self.keys[i]
                return self.items.pop(key), key[0]
        return None


def plan_tvm_greedy(live: Liveness, alignment: int = 64) -> MemoryPlan:
    plan = MemoryPlan("tvm-greedy", alignment)
    tensors = live.tensors
    refs = [0] * len(tensors)
    for step in live.steps:
        for t in step.inputs:
            refs[t] += 1
    for t in live.outputs:
        refs[t] += 1
    free = _FreeList()

    def new_storage(t: int, kind: str) -> None:
        tensor = tensors[t]
        storage = Storage(len(plan.storages), tensor.device, tensor.nbytes, kind, tensor.nbytes)
        plan.storages.append(storage)
        plan.placement[t] = (storage.index, 0)

    def release(t: int) -> None:
        if refs[t] == 0 and tensors[t].kind == CALL:
            sid = plan.placement[t][0]
            free.insert(plan.storages[sid].nbytes, sid)

    for t in tensors:
        if t.kind == PARAM:
            new_storage(t.index, INPUT)
    for step in live.steps:
        for t in step.inputs:
            if tensors[t].kind == CONSTANT and t not in plan.placement:
                new_storage(t, INPUT)
        if step.kind != ALIAS and not step.hoisted:
            for t in step.outputs:
                tensor = tensors[t]
                key = device_key(tensor.device)
                got = free.take(tensor.nbytes, lambda sid, key=key: device_key(plan.storages[sid].device) == key)
                if got is None:
                    new_storage(t, TOKEN)
                else:
                    sid, size = got
                    plan.storages[sid].nbytes = max(size, tensor.nbytes)
                    plan.placement[t] = (sid, 0)
            for t in step.outputs:
                release(t)
        for t in step.inputs:
            refs[t] -= 1
            release(t)
    for t in tensors:  # a constant no step reads (unused, or returned as it is) still has its storage
        if t.kind == CONSTANT and t.index not in plan.placement:
            new_storage(t.index, INPUT)
    return plan


# ---------------------------------------------------------------------------------------------
# greedy-by-size


@dataclass
class _Buffer:
    """Tensors placed together: one tensor, an in-place chain, or a concatenation and its inputs."""

    members: list[tuple[int, int]]  # (tensor, byte offset inside the buffer)
    nbytes: int
    first: int
    last: int
    device: Device
    # Holds a concatenation: its bytes are several tensors', so nothing may overwrite them in place.
    shared: bool = False


def _absorb(into: _Buffer, src: _Buffer, delta: int, owner: dict[int, _Buffer]) -> None:
    for t, d in src.members:
        into.members.append((t, d + delta))
        owner[t] = into
    into.first = min(into.first, src.first)
    into.last = max(into.last, src.last)
    src.members = []


def plan_buffers(live: Liveness, alignment: int = 64, in_place: bool = False,
                 concat_in_place: bool = False) -> list[_Buffer]:
    """The units greedy-by-size places. With `in_place`, an element-wise step's result joins a
    same-typed input that dies at that step; with `concat_in_place`, the inputs of a step that
    only concatenates (into contiguous slices) are placed inside its result at their slice."""
    tensors = live.tensors
    outputs = set(live.outputs)
    owner: dict[int, _Buffer] = {}
    buffers: list[_Buffer] = []
    for t in live.planned():
        if t.step >= 0 and live.steps[t.step].kind == ALIAS:
            continue
        owner[t.index] = _Buffer([(t.index, 0)], t.nbytes, t.first, t.last, t.device)
        buffers.append(owner[t.index])
    in_a_concat: set[int] = set()
    for step in live.steps:
        if step.kind == ALIAS or step.hoisted or len(step.outputs) != 1:
            continue
        out = tensors[step.outputs[0]]
        mine = owner[out.index]
        if concat_in_place and step.concat_offsets is not None:
            for t, delta in zip(step.inputs, step.concat_offsets):
                buf = owner.get(t)
                if (buf is None or buf is mine or t in in_a_concat or step.inputs.count(t) != 1
                        or delta % alignment or buf.members[0] != (t, 0) or buf.nbytes != tensors[t].nbytes
                        or device_key(buf.device) != device_key(out.device)):
                    continue
                in_a_concat.add(t)
                _absorb(mine, buf, delta, owner)
                mine.shared = True
        elif in_place and step.elementwise:
            for t in dict.fromkeys(step.inputs):
                src = tensors[t]
                buf = owner.get(t)
                if (buf is not None and not buf.shared and buf.members[-1] == (t, 0) and src.last == step.index
                        and t not in outputs and src.ttype == out.ttype
                        and device_key(src.device) == device_key(out.device)):
                    _absorb(buf, mine, 0, owner)
                    break
    return [b for b in buffers if b.members]


def buffer_pressure(buffers: list[_Buffer], steps: int) -> list[int]:
    """For each buffer, the most bytes (of all buffers) live at one step of its range: buffers that
    meet the peak come first in the `pressure` order, so the peak is packed before anything else."""
    total = [0] * (steps + 1)
    for buf in buffers:
        for s in range(buf.first, buf.last + 1):
            total[s] += buf.nbytes
    return [max(total[buf.first:buf.last + 1]) for buf in buffers]


def buffers_bound(buffers: list[_Buffer], steps: int) -> dict[object, int]:
    """Per device, the most bytes of `buffers` live at one step: no placement of them uses less."""
    total: dict[object, list[int]] = {}
    for buf in buffers:
        key = device_key(buf.device)
        if key not in total:
            total[key] = [0] * (steps + 1)
        row = total[key]
        for s in range(buf.first, buf.last + 1):
            row[s] += buf.nbytes
    return {key: max(row) for key, row in total.items()}


# Orders in which greedy placement can take the buffers: each maker gets the buffers and the number
# of steps and returns a sort key of a buffer index.
ORDERS: dict[str, Callable[[list[_Buffer], int], Callable[[int], tuple]]] = {
    "size": lambda b, n: lambda i: (-b[i].nbytes, b[i].first, i),
    "area": lambda b, n: lambda i: (-b[i].nbytes * (b[i].last - b[i].first + 1), b[i].first, i),
    "duration": lambda b, n: lambda i: (b[i].first - b[i].last, -b[i].nbytes, i),
    "pressure": lambda b, n: _pressure_key(b, buffer_pressure(b, n)),
}


def _pressure_key(b: list[_Buffer], pressure: list[int]) -> Callable[[int], tuple]:
    return lambda i: (-pressure[i], -b[i].nbytes, b[i].first, i)


# Local-search moves greedy-best tries after the fixed orders when none reaches the bound.
SEARCH_MOVES = 300
# Placements the repair pass of greedy-by-size may try (each is one greedy placement of all buffers),
# and the work (buffers + steps they span, summed over the tries) it may spend: about a second.
REPAIR_PLACEMENTS = 48
REPAIR_WORK = 200_000
# Buffers of the support chain tried per round of the repair.
REPAIR_CHAIN = 32


def plan_greedy_by_size(live: Liveness, alignment: int = 64, in_place: bool = False,
                        concat_in_place: bool = False, repair: int = REPAIR_PLACEMENTS) -> MemoryPlan:
    """Largest first at the lowest free offset, then (when above the bound) `repair_order`."""
    def make(reuse: tuple[bool, bool]) -> MemoryPlan:
        buffers = plan_buffers(live, alignment, *reuse)
        order = sorted(range(len(buffers)), key=ORDERS["size"](buffers, len(live.steps)))
        return repair_order(live, buffers, alignment, order, repair)[0]
    return _with_reuse(make, in_place, concat_in_place)


def _with_reuse(make: Callable[[tuple[bool, bool]], MemoryPlan], in_place: bool, concat_in_place: bool) -> MemoryPlan:
    """The smallest of the plans with each subset of the requested reuse options (ties: more
    reuse): a reuse option is used only where it pays (a concatenation's buffer lives as long as
    all of its inputs together, which can raise the peak)."""
    choices = list(dict.fromkeys([(in_place, concat_in_place), (in_place, False), (False, concat_in_place),
                                  (False, False)]))
    best: MemoryPlan | None = None
    for reuse in choices:
        plan = make(reuse)
        plan.in_place, plan.concat_in_place = reuse
        if best is None or plan.workspace_bytes() < best.workspace_bytes():
            best = plan
    assert best is not None
    return best


def plan_greedy_best(live: Liveness, alignment: int = 64, in_place: bool = False,
                     concat_in_place: bool = False, moves: int = SEARCH_MOVES) -> MemoryPlan:
    """Greedy placement in each of `ORDERS`, each repaired; the smallest arena wins (ties: the
    earlier order), so never worse than greedy-by-size. Unless that reaches the bound of the
    buffers, a local search follows: up to `moves` times a buffer that ends at the top of the arena
    is moved earlier in the order (seeded, so the plan is reproducible); the new order is kept when
    its arena is no larger."""
    return _with_reuse(lambda reuse: _greedy_best(live, alignment, reuse, moves), in_place, concat_in_place)


def _greedy_best(live: Liveness, alignment: int, reuse: tuple[bool, bool], moves: int) -> MemoryPlan:
    steps = len(live.steps)
    buffers = plan_buffers(live, alignment, *reuse)
    tries = [repair_order(live, buffers, alignment, sorted(range(len(buffers)), key=make(buffers, steps)))
             for make in ORDERS.values()]
    best, order = min(tries, key=lambda got: got[0].workspace_bytes())
    bound = _arena_bound(buffers, steps, alignment)
    rng = random.Random(0)
    for _ in range(moves if len(buffers) > 1 else 0):
        if best.workspace_bytes() <= bound:
            break
        # Move a buffer that reaches the top of the arena to an earlier place in the order.
        k = rng.choice([k for k, i in enumerate(order) if _at_top(best, buffers[i])])
        trial = list(order)
        trial.insert(rng.randrange(k + 1), trial.pop(k))
        plan = place_buffers(live, buffers, alignment, _by_position(trial))
        if plan.workspace_bytes() <= best.workspace_bytes():
            best, order = plan, trial
    best.algorithm = "greedy-best"
    return best


def _arena_bound(buffers: list[_Buffer], steps: int, alignment: int) -> int:
    """Per device, the most any placement of `buffers` at `alignment` needs at one step, summed:
    every buffer live there but the highest is followed by an aligned offset, so it takes its
    size rounded up; the highest takes its size."""
    total: dict[object, list[int]] = {}
    waste: dict[object, list[int]] = {}
    for buf in buffers:
        key = device_key(buf.device)
        if key not in total:
            total[key], waste[key] = [0] * (steps + 1), [0] * (steps + 1)
        row, loss = total[key], waste[key]
        padded = align_up(buf.nbytes, alignment)
        for s in range(buf.first, buf.last + 1):
            row[s] += padded
            loss[s] = max(loss[s], padded - buf.nbytes)
    return sum(max(t - w for t, w in zip(total[key], waste[key])) for key in total)


def repair_order(live: Liveness, buffers: list[_Buffer], alignment: int, order: list[int],
                 budget: int = REPAIR_PLACEMENTS) -> tuple[MemoryPlan, list[int]]:
    """Greedy placement in `order`, then a bounded, deterministic repair while above the bound.

    The arena's height is set by the buffers that reach its top and, under them, the chain of
    buffers each one rests on (same storage, ranges meet, it starts where the other ends). Placed
    earlier, one of those may leave room lower down: each chain buffer is tried just before each
    earlier buffer it meets in the order (every try is one full greedy placement; at most `budget`
    tries). The best try (smallest arena, then fewest buffers at the top) is kept when it is no
    worse, and a buffer moved once is not moved again, so equal-height moves cannot cycle.
    DenseNet's concatenation chain is the case: size order puts a block's last, largest
    concatenation at the bottom, where the longer-lived one before it belongs."""
    plan = place_buffers(live, buffers, alignment, _by_position(order))
    bound = _arena_bound(buffers, len(live.steps), alignment)
    work = len(buffers) + sum(b.last - b.first + 1 for b in buffers)
    budget = min(budget, REPAIR_WORK // max(work, 1))
    score = _height(plan, buffers)
    moved: set[int] = set()
    used = 0
    while plan.workspace_bytes() > bound and used < budget:
        best: tuple[tuple[int, int], MemoryPlan, list[int], int] | None = None
        position = {i: k for k, i in enumerate(order)}
        for c in _support_chain(plan, buffers, alignment, moved)[:REPAIR_CHAIN]:
            k = position[c]
            for p in range(k):
                if used >= budget:
                    break
                if not _meet(buffers[order[p]], buffers[c]):
                    continue
                trial = order[:p] + [c] + order[p:k] + order[k + 1:]
                got = place_buffers(live, buffers, alignment, _by_position(trial))
                used += 1
                height = _height(got, buffers)
                if best is None or height < best[0]:
                    best = (height, got, trial, c)
        if best is None or best[0] > score:
            break
        score, plan, order, c = best
        moved.add(c)
    return plan, order


def _meet(a: _Buffer, b: _Buffer) -> bool:
    """Both are live at some step, in one arena."""
    return a.first <= b.last and b.first <= a.last and device_key(a.device) == device_key(b.device)


def _placed_at(plan: MemoryPlan, buf: _Buffer) -> tuple[int, int]:
    """(storage, offset) of a buffer (its first member sits at its offset plus its delta)."""
    t, delta = buf.members[0]
    sid, offset = plan.placement[t]
    return sid, offset - delta


def _height(plan: MemoryPlan, buffers: list[_Buffer]) -> tuple[int, int]:
    """What the repair minimises: the arena bytes, then how many buffers reach an arena's top."""
    return plan.workspace_bytes(), sum(1 for b in buffers if _at_top(plan, b))


def _support_chain(plan: MemoryPlan, buffers: list[_Buffer], alignment: int, moved: set[int]) -> list[int]:
    """The buffers at the top of their arena and, transitively, the buffers they rest on (nearest
    first); buffers in `moved` are left out, but the chain runs through them."""
    where = [_placed_at(plan, b) for b in buffers]
    ending: dict[tuple[int, int], list[int]] = {}  # (storage, aligned end) -> buffers
    for y, b in enumerate(buffers):
        ending.setdefault((where[y][0], align_up(where[y][1] + b.nbytes, alignment)), []).append(y)
    frontier = deque(i for i, b in enumerate(buffers) if _at_top(plan, b))
    seen = set(frontier)
    chain: list[int] = []
    while frontier and len(chain) < REPAIR_CHAIN + len(moved):
        x = frontier.popleft()
        chain.append(x)
        if where[x][1] == 0:
            continue
        for y in ending.get(where[x], ()):
            if y not in seen and _meet(buffers[y], buffers[x]):
                seen.add(y)
                frontier.append(y)
    return [i for i in chain if i not in moved]


def _at_top(plan: MemoryPlan, buf: _Buffer) -> bool:
    """The buffer ends where its arena ends (so moving it may shrink the arena)."""
    sid, offset = _placed_at(plan, buf)
    return offset + buf.nbytes == plan.storages[sid].nbytes


def _by_position(order: list[int]) -> Callable[[int], int]:
    position = {i: k for k, i in enumerate(order)}
    return position.__getitem__


def place_buffers(live: Liveness, buffers: list[_Buffer], alignment: int,
                  order: Callable[[int], tuple]) -> MemoryPlan:
    """Place `buffers` one by one in `order` (of their indices), each at the lowest aligned offset
    of its device's arena that is free over its live range."""
    plan = MemoryPlan("greedy-by-size", alignment)
    arenas: dict[object, Storage] = {}
    for buf in buffers:  # arenas in order of first appearance
        key = device_key(buf.device)
        if key not in arenas:
            arenas[key] = Storage(len(plan.storages), buf.device, 0, ARENA)
            plan.storages.append(arenas[key])
    # Placed buffers by the steps they are live at, so a new buffer only meets its neighbours.
    live_at: list[list[tuple[int, int, int]]] = [[] for _ in range(len(live.steps) + 1)]
    for i in sorted(range(len(buffers)), key=order):
        buf = buffers[i]
        arena = arenas[device_key(buf.device)]
        busy: dict[int, int] = {}
        for s in range(buf.first, buf.last + 1):
            for sid, offset, end in live_at[s]:
                if sid == arena.index:
                    busy[offset] = max(busy.get(offset, 0), end)
        offset = 0
        for start in sorted(busy):
            if start >= offset + buf.nbytes:
                break
            offset = max(offset, align_up(busy[start], alignment))
        for s in range(buf.first, buf.last + 1):
            live_at[s].append((arena.index, offset, offset + buf.nbytes))
        arena.nbytes = max(arena.nbytes, offset + buf.nbytes)
        if arena.first_bytes == 0:
            arena.first_bytes = buf.nbytes
        for t, delta in buf.members:
            plan.placement[t] = (arena.index, offset + delta)
    return plan


PLANNERS: dict[str, Callable[[Liveness, int], MemoryPlan]] = {
    "greedy-by-size": plan_greedy_by_size,
    "greedy-best": plan_greedy_best,
    "tvm-greedy": plan_tvm_greedy,
    "none": plan_none,
}
# Offset planners: one arena per device, and the in-place options apply.
ARENA_PLANNERS = {"greedy-by-size": plan_greedy_by_size, "greedy-best": plan_greedy_best}


def results_outside(live: Liveness) -> set[int]:
    """The results of `main` that a step computes (the tensors a `results_outside` plan leaves to
    the caller's buffers)."""
    return {t for t in live.outputs if live.tensors[t].kind == CALL}


def plan_memory(live: Liveness, algorithm: str = "greedy-by-size", alignment: int = 64,
                in_place: bool = False, concat_in_place: bool = False,
                outside: bool = False) -> MemoryPlan:
    """Plan with a named algorithm; the reuse options belong to greedy-by-size (the baselines stay
    as TVM has them). With `outside`, the results steps compute take no bytes (`results_outside`)."""
    if outside:
        skip = results_outside(live)
        live = replace(live, tensors=[replace(t, nbytes=0) if t.index in skip else t for t in live.tensors])
    if algorithm in ARENA_PLANNERS:
        plan = ARENA_PLANNERS[algorithm](live, alignment, in_place, concat_in_place)
    elif in_place or concat_in_place:
        raise DiagnosticError(f"plan-memory: in-place and concat-in-place apply to greedy-by-size and "
                              f"greedy-best, not {algorithm}")
    else:
        plan = PLANNERS[algorithm](live, alignment)
    plan.results_outside = outside
    return plan


def concat_parents(live: Liveness, plan: MemoryPlan) -> dict[int, int]:
    """Tensor -> the concatenation result that holds it exactly at its slice, for a plan made with
    concatenate-in-place (re-derived from the IR and the placement, not taken from the planner)."""
    parent: dict[int, int] = {}
    if not plan.concat_in_place:
        return parent
    for step in live.steps:
        if step.concat_offsets is None or step.kind == ALIAS or step.hoisted or len(step.outputs) != 1:
            continue
        out = plan.placement.get(step.outputs[0])
        if out is None:
            continue
        for t, delta in zip(step.inputs, step.concat_offsets):
            if (live.tensors[t].kind == CALL and t not in parent and step.inputs.count(t) == 1
                    and plan.placement.get(t) == (out[0], out[1] + delta)):
                parent[t] = step.outputs[0]
    return parent


def concats_in_place(live: Liveness, plan: MemoryPlan) -> set[int]:
    """Steps (indices) of concatenations whose every input already sits at its slice of the
    result: running them would copy each byte onto itself, so code generation may skip them."""
    parent = concat_parents(live, plan)
    return {step.index for step in live.steps
            if step.concat_offsets is not None and step.outputs and step.inputs
            and all(parent.get(t) == step.outputs[0] for t in step.inputs)}
