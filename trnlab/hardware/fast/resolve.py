"""The compiled replay's resolve with its bookkeeping inlined: the same resolved program, sooner.

The reference is `replay_timing._resolve`: per instruction, the earlier results it waits for, from
the per-buffer read and write records of `dependencies.py` (RAW, WAR, WAW on overlapping boxes,
PSUM accumulation groups, records merged past `dependencies.MAX_RECORDS`, the bytes a new tile
inherits from freed ones). It calls a small helper for each step — `raw`, `war_waw`,
`note_reads`, `note_write`, `add_read`, `add_write`, `latest`, `dedupe` — which is what makes it
readable, and at ~12 Python calls per instruction also what it spends most of its time on: the
resolve is a third of the list schedule's cost at trace time, and runs again on every first replay.

This module runs the very same steps in the same order with the helpers written out in place
(and the unavoidable box tests kept as calls of `dependencies.overlap` / `covers`), so it produces
the same ops, node numbers and records, element for element (tests/test_fast_schedule.py compares
the two `Resolved` objects on kernels of every instruction kind). Used while `config.fast()`.

Written out for a DMA's and a matmul's destination: the WAW / WAR wait and the new write record
(`wait_write`, `note_write`); for a tile placed in memory, the bytes it inherits when they are one
whole freed range (`take_ranges`; that range's group is already what `latest` would make of it:
each node once, at most GROUP_MAX); for a freed tile, its group (`latest`). No comprehensions on
these paths: on CPython 3.11 each is a call of its own.
"""
from __future__ import annotations

from ..dependencies import KEEP, MAX_RECORDS, _union, covers, overlap
from bisect import bisect_right

from ..memory import put_range, take_ranges
from ..records import (DMA, DMA_OP, ENGINE_OP, ISSUE, LATEST_OP, MATMUL, PE_ISSUE, PE_OP, PRINT_OP, SEED,
                       SEED_OP)

GROUP_MAX = 4       # as replay_timing.GROUP_MAX (checked equal by the tests)


def resolve(program, issues, spec, layout, static):
    """`replay_timing._resolve(program, issues, spec, layout, static)`, the same `Resolved`."""
    from ..replay_timing import Resolved, placed_ports
    starts, ends, extent, unwritten, lines = static
    buffers = program.buffers
    n_buffers = len(buffers)
    reads = [None] * n_buffers          # buffer id -> [[box, group]]
    writes = [None] * n_buffers         # buffer id -> [[box, group, by_matmul]]
    version = [0] * n_buffers
    for b in buffers:
        if b.memory == "hbm":
            reads[b.id], writes[b.id] = [], []
    ops = []
    append_op = ops.append
    n_nodes = 0
    external, retired = {}, {}
    for memory in ("sbuf", "psum"):
        ranges = []
        for lo, hi in layout[memory]:
            ranges.append([lo, hi, (n_nodes,)])
            n_nodes += 1
        external[memory] = [r[2][0] for r in ranges]
        retired[memory] = ranges
    rstarts = {m: [r[0] for r in retired[m]] for m in retired}
    fromkeys = dict.fromkeys

    def latest(nodes) -> tuple:         # replay_timing's `latest` (numbers a "latest of" node)
        nonlocal n_nodes
        if len(nodes) == 1:
            return tuple(nodes)
        nodes = tuple(fromkeys(nodes))
        if len(nodes) <= GROUP_MAX:
            return nodes
        append_op((LATEST_OP, n_nodes, nodes))
        n_nodes += 1
        return (n_nodes - 1,)

    def compact(records, write: bool) -> None:      # dependencies.compact with the group merges
        old = records[:-KEEP]
        merged = [_union([r[0] for r in old]), latest([n for r in old for n in r[1]])]
        if write:
            merged.append(False)
        records[:-KEEP] = [merged]

    def wait_write(bid, vb, deps, group_deps) -> None:   # war_waw: WAW, then WAR (write_waits)
        rs, ws = reads[bid], writes[bid]
        if not (rs or ws):
            return
        for r in ws:
            box = r[0]
            if box is None or vb is None or overlap(box, vb):
                if group_deps is not None and r[-1]:
                    group_deps.extend(r[1])
                else:
                    deps.extend(r[1])
        for r in rs:
            box = r[0]
            if box is None or vb is None or overlap(box, vb):
                deps.extend(r[1])

    def note_write(bid, vb, record) -> None:        # add_write, then version + 1
        rs, ws = reads[bid], writes[bid]
        if vb is None:
            rs.clear()
            ws.clear()
        else:
            if rs:
                rs[:] = [r for r in rs if not covers(vb, r[0])]
            if ws:
                ws[:] = [r for r in ws if not covers(vb, r[0])]
        ws.append(record)
        if len(ws) > MAX_RECORDS:
            compact(ws, True)
        version[bid] += 1

    bank_bytes = spec.psum_bank_bytes
    resident_reads = {b.id: [] for b in buffers if b.memory == "hbm"}
    stationary = None
    spans, current, current_start = [], None, 0
    rec = 0
    cursor = {"sbuf": None, "psum": None}
    allocations = {"sbuf": 0, "psum": 0}
    for k, d in enumerate(issues):
        allocated = starts.get(k)
        if allocated:
            for b in allocated:
                bid = b.id
                lo, hi = extent[bid]
                memory = b.memory
                ranges, rs = retired[memory], rstarts[memory]
                i = bisect_right(rs, lo) - 1         # take_ranges, with one range taken whole inline
                if i < 0 or ranges[i][1] <= lo:
                    i += 1
                if i < len(ranges) and ranges[i][0] < hi:
                    r = ranges[i]
                    if r[0] >= lo and r[1] <= hi and (i + 1 == len(ranges) or ranges[i + 1][0] >= hi):
                        del ranges[i], rs[i]
                        # one freed range: its group is latest()'s own result already (each node
                        # once, at most GROUP_MAX of them), which latest() would give back as it is
                        group = r[2]
                    else:
                        found = []
                        for r in take_ranges(ranges, rs, lo, hi):
                            found += r[2]
                        if len(found) == 1:
                            group = tuple(found)
                        else:                                # latest(found), written out
                            group = tuple(fromkeys(found))
                            if len(group) > GROUP_MAX:
                                append_op((LATEST_OP, n_nodes, group))
                                group = (n_nodes,)
                                n_nodes += 1
                    reads[bid] = [[None, group]]
                else:
                    reads[bid] = []
                writes[bid] = []
                version[bid] = 0
                cursor[memory] = hi
                allocations[memory] += 1
        note, region = lines[k]
        if region != current:
            if current:
                spans.append((current, current_start, rec))
            current, current_start = region, rec
        kind = d[0]
        if kind == DMA:
            _, opcode, dref, rrefs, nbytes, queue, fixed, cycles, engine_ns, hbm, sbuf = d
            deps = []
            for bid, vb in rrefs:                                        # RAW
                for r in writes[bid] or ():
                    box = r[0]
                    if box is None or vb is None or overlap(box, vb):
                        deps.extend(r[1])
            dbid, dvb = dref
            rs, ws = reads[dbid], writes[dbid]
            for r in ws:                                                 # wait_write (WAW, WAR)
                box = r[0]
                if box is None or dvb is None or overlap(box, dvb):
                    deps.extend(r[1])
            for r in rs:
                box = r[0]
                if box is None or dvb is None or overlap(box, dvb):
                    deps.extend(r[1])
            node = n_nodes
            n_nodes += 1
            append_op((DMA_OP, tuple(fromkeys(deps)) if len(deps) > 1 else tuple(deps), queue, fixed, cycles,
                       engine_ns, hbm, node, opcode, sbuf, note))
            group = (node,)
            for bid, vb in rrefs:
                if bid not in unwritten:
                    rrs = reads[bid]
                    rrs.append([vb, group])
                    if len(rrs) > MAX_RECORDS:
                        compact(rrs, False)
            if dvb is None:                                              # note_write
                rs.clear()
                ws.clear()
            else:
                if rs:
                    rs[:] = [r for r in rs if not covers(dvb, r[0])]
                if ws:
                    ws[:] = [r for r in ws if not covers(dvb, r[0])]
            ws.append([dvb, group, False])
            if len(ws) > MAX_RECORDS:
                compact(ws, True)
            version[dbid] += 1
            for r in rrefs:
                if r[0] in resident_reads:
                    resident_reads[r[0]].append((r[1], node))
        elif kind == MATMUL:
            _, dref, sref, mref, busy, lat, load, flops, sbuf, psum = d[:10]
            tiles = d[10] if len(d) > 10 else 0
            pre = []
            bid, vb = mref
            for r in writes[bid] or ():
                box = r[0]
                if box is None or vb is None or overlap(box, vb):
                    pre.extend(r[1])
            sv = (sref[0], sref[1], version[sref[0]])
            new = stationary is None or stationary != sv
            st_deps = []
            if new:
                bid, vb = sref
                for r in writes[bid] or ():
                    box = r[0]
                    if box is None or vb is None or overlap(box, vb):
                        st_deps.extend(r[1])
                stationary = sv
            post, group_deps = [], []
            dbid, dvb = dref
            rs, ws = reads[dbid], writes[dbid]
            for r in ws:                         # wait_write: WAW (the accumulation group apart), WAR
                box = r[0]
                if box is None or dvb is None or overlap(box, dvb):
                    if r[-1]:
                        group_deps.extend(r[1])
                    else:
                        post.extend(r[1])
            for r in rs:
                box = r[0]
                if box is None or dvb is None or overlap(box, dvb):
                    post.extend(r[1])
            end_node, ready_node = n_nodes, n_nodes + 1
            n_nodes += 2
            append_op((PE_OP, tuple(fromkeys(pre)) if len(pre) > 1 else tuple(pre), new,
                       tuple(fromkeys(st_deps)) if len(st_deps) > 1 else tuple(st_deps),
                       tuple(fromkeys(post)) if len(post) > 1 else tuple(post),
                       tuple(fromkeys(group_deps)) if len(group_deps) > 1 else tuple(group_deps),
                       busy, lat, load, end_node, ready_node, "nc_matmul", flops, sbuf, psum, note, tiles))
            group = (end_node,)
            for bid, vb in (sref, mref):
                if bid not in unwritten:
                    rrs = reads[bid]
                    rrs.append([vb, group])
                    if len(rrs) > MAX_RECORDS:
                        compact(rrs, False)
            if dvb is None:                      # note_write
                rs.clear()
                ws.clear()
            else:
                if rs:
                    rs[:] = [r for r in rs if not covers(dvb, r[0])]
                if ws:
                    ws[:] = [r for r in ws if not covers(dvb, r[0])]
            ws.append([dvb, (ready_node,), True])
            if len(ws) > MAX_RECORDS:
                compact(ws, True)
            version[dbid] += 1
        elif kind == ISSUE:
            _, eid, opcode, dur, rrefs, wrefs, flops, sbuf, psum, sbuf_port, psum_port, hidden = d
            deps = []
            for bid, vb in rrefs:
                for r in writes[bid] or ():
                    box = r[0]
                    if box is None or vb is None or overlap(box, vb):
                        deps.extend(r[1])
            for bid, vb in wrefs:
                wait_write(bid, vb, deps, None)
            ports = placed_ports(d, buffers, bank_bytes)
            node = n_nodes
            n_nodes += 1
            append_op((ENGINE_OP, eid, dur, tuple(fromkeys(deps)) if len(deps) > 1 else tuple(deps), ports,
                       node, opcode, flops, sbuf, psum, note, hidden))
            group = (node,)
            for bid, vb in rrefs:
                if bid not in unwritten:
                    rs = reads[bid]
                    rs.append([vb, group])
                    if len(rs) > MAX_RECORDS:
                        compact(rs, False)
            for bid, vb in wrefs:
                note_write(bid, vb, [vb, group, False])
            for r in rrefs:
                if r[0] in resident_reads:
                    resident_reads[r[0]].append((r[1], node))
        elif kind == PE_ISSUE:
            _, opcode, sref, rrefs, dref, busy, lat, load, flops, sbuf, psum = d[:11]
            tiles = d[11] if len(d) > 11 else 0
            pre, st_deps, post = [], [], []
            for refs, out in ((rrefs, pre), ((sref,), st_deps)):
                for bid, vb in refs:
                    for r in writes[bid] or ():
                        box = r[0]
                        if box is None or vb is None or overlap(box, vb):
                            out.extend(r[1])
            stationary = None
            wait_write(dref[0], dref[1], post, None)
            end_node, ready_node = n_nodes, n_nodes + 1
            n_nodes += 2
            append_op((PE_OP, tuple(fromkeys(pre)) if len(pre) > 1 else tuple(pre), True,
                       tuple(fromkeys(st_deps)) if len(st_deps) > 1 else tuple(st_deps),
                       tuple(fromkeys(post)) if len(post) > 1 else tuple(post), (), busy, lat, load,
                       end_node, ready_node, opcode, flops, sbuf, psum, note, tiles))
            group = (end_node,)
            for bid, vb in (sref,) + rrefs:
                if bid not in unwritten:
                    rs = reads[bid]
                    rs.append([vb, group])
                    if len(rs) > MAX_RECORDS:
                        compact(rs, False)
            note_write(dref[0], dref[1], [dref[1], (ready_node,), False])
        elif kind == SEED:
            _, rrefs, dur = d
            deps = []
            for bid, vb in rrefs:
                for r in writes[bid] or ():
                    box = r[0]
                    if box is None or vb is None or overlap(box, vb):
                        deps.extend(r[1])
            node = n_nodes
            n_nodes += 1
            append_op((SEED_OP, tuple(fromkeys(deps)) if len(deps) > 1 else tuple(deps), dur, node, note))
            group = (node,)
            for bid, vb in rrefs:
                if bid not in unwritten:
                    rs = reads[bid]
                    rs.append([vb, group])
                    if len(rs) > MAX_RECORDS:
                        compact(rs, False)
        else:
            append_op((PRINT_OP, d[1], d[2]))
            rec -= 1
        rec += 1
        freed = ends.get(k)
        if freed:
            for b in freed:
                bid = b.id
                nodes = []
                for r in reads[bid]:
                    nodes += r[1]
                for r in writes[bid]:
                    nodes += r[1]
                reads[bid] = writes[bid] = None
                if not nodes:
                    continue
                lo, hi = extent[bid]
                ranges, rs = retired[b.memory], rstarts[b.memory]
                i = bisect_right(rs, lo)
                if len(nodes) == 1:
                    group = tuple(nodes)
                else:                                        # latest(nodes), written out
                    group = tuple(fromkeys(nodes))
                    if len(group) > GROUP_MAX:
                        append_op((LATEST_OP, n_nodes, group))
                        group = (n_nodes,)
                        n_nodes += 1
                if (i == 0 or ranges[i - 1][1] <= lo) and (i == len(rs) or rs[i] >= hi):
                    ranges.insert(i, [lo, hi, group])        # (put_range where nothing overlaps)
                    rs.insert(i, lo)
                else:
                    put_range(ranges, rs, [lo, hi, group])
    if current:
        spans.append((current, current_start, rec))
    for memory in retired:
        for r in retired[memory]:
            group = r[2]
            if len(group) > 1:
                append_op((LATEST_OP, n_nodes, group))
                r[2] = (n_nodes,)
                n_nodes += 1
            r[2] = r[2][0]
    r = Resolved()
    r.ops, r.nodes, r.external, r.retired = ops, n_nodes, external, retired
    r.resident_reads = {bid: v for bid, v in resident_reads.items() if v}
    r.spans, r.records, r.cursor, r.allocations = spans, rec, cursor, allocations
    r.last_note = lines[-1][0] if lines else None
    return r
