def pipeline_step_us(stages, microbatches, forward_us, backward_us):
    return (microbatches + stages - 1) * (forward_us + backward_us)
