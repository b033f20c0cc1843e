def place_updates(backward):
    regions = [region for region, _ in backward]
    ready = {}                                   # parameter -> the LAST call that writes its gradient
    for region, params in backward:              # (the tied token table is written twice)
        for name in params:
            ready[name] = region
    # Not directly behind that call: there the update is older than the backward's next call and runs
    # first, and the backward (the critical path) waits. One call later, the next backward call goes
    # first and the update fills the engines' waits.
    placement = {name: regions[min(regions.index(r) + 1, len(regions) - 1)] for name, r in ready.items()}
    # the forward and backward (302.9 µs), the updates left after the backward's last call at the
    # default tail's average (49.5 µs / 16 updates each), and about half that for each one inside it
    per_update = 49.5 / 16
    after_end = sum(1 for name in placement if placement[name] == regions[-1])
    inside = len(placement) - after_end
    return {"placement": placement, "predicted_us": 302.9 + after_end * per_update + inside * per_update / 2}
