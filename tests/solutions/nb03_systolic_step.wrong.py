def systolic_step(stationary, moving_regs, psum_regs, left_inputs):
    new_moving = np.empty_like(moving_regs)
    new_moving[:, 0] = left_inputs
    new_moving[:, 1:] = moving_regs[:, :-1]
    new_psum = np.zeros_like(psum_regs)
    for row in range(stationary.shape[0]):
        # mistake: adds the row above's NEW sum, so a partial sum falls through every row in one cycle
        above = new_psum[row - 1] if row > 0 else 0.0
        new_psum[row] = above + stationary[row] * new_moving[row]
    return new_moving, new_psum
