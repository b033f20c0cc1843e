def plan_layout() -> dict:
    # mistake: halves the pipeline for a smaller bubble and never checks the memory — 121 GiB per chip
    return {"layout": (4, 8, 2), "predicted_step_s": 23.7}
