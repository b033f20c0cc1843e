def place_updates(backward, default):
    regions = [region for region, _ in backward]
    ready = {}                                   # parameter -> the LAST call that writes its gradient
    for region, params in backward:              # (the tied token table is written twice)
        for name in params:
            ready[name] = region
    # Not directly behind that call: there the update is older than the backward's next call and runs
    # first, and the backward (the critical path) waits. One call later, the next backward call goes
    # first and the update fills the engines' waits.
    placement = {name: regions[min(regions.index(r) + 1, len(regions) - 1)] for name, r in ready.items()}
    # predicted: the forward and backward, the updates left after the backward's last call at the
    # default tail's average each, and about half that for each one inside the backward (not free:
    # it shares the engines with the backward's calls)
    per_update = default["optimizer_us"] / len(placement)
    after_end = sum(1 for region in placement.values() if region == regions[-1])
    inside = len(placement) - after_end
    predicted = default["forward_us"] + default["backward_us"] + per_update * (after_end + inside / 2)
    return {"placement": placement, "predicted_us": predicted}
