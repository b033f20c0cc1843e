def plan_layout(model_name: str, system: str, global_batch: int) -> dict:
    # mistake: halves the pipeline for a smaller bubble and never checks the memory (121 GiB per chip
    # for the 70B, 437 GiB for the 7B without a pipeline)
    layouts = {"70B-class": (4, 8, 2), "7B-class": (8, 2, 1)}
    return {"layout": layouts[model_name], "predicted_step_s": 23.7 if model_name == "70B-class" else 2.4}
