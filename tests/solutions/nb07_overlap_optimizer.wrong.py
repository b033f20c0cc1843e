def place_updates(backward, default):
    # mistake: each update after the FIRST call that writes its gradient — the tied token table's
    # gradient is written twice (by the lm_head's matmul, then by the embedding's backward)
    placement = {}
    for region, params in backward:
        for name in params:
            placement.setdefault(name, region)
    return {"placement": placement, "predicted_us": default["forward_us"] + default["backward_us"]}
