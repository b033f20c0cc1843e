def systolic_step(stationary, moving_regs, psum_regs, left_inputs):
    new_moving = np.empty_like(moving_regs)
    new_moving[:, 0] = left_inputs  # values enter from the left...
    new_moving[:, 1:] = moving_regs[:, :-1]  # ...and move one PE to the right
    from_above = np.zeros_like(psum_regs)
    from_above[1:, :] = psum_regs[:-1, :]  # what the row above held last cycle; row 0 gets 0
    new_psum = from_above + stationary * new_moving
    return new_moving, new_psum
