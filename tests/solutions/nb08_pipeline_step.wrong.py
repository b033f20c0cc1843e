def pipeline_step_us(stages, microbatches, forward_us, backward_us):
    # mistake: the pipe is assumed always full (no bubble)
    return microbatches * (forward_us + backward_us)
