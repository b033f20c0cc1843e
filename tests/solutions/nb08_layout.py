from trnlab.distributed import scaling, topology


def choose_layout(model_name, system, global_batch):
    model, machine = scaling.MODELS[model_name], topology.get(system)
    n = machine.ranks
    powers = [2**i for i in range(n.bit_length()) if 2**i <= n]
    best, best_speed = None, 0.0
    for dp in powers:
        for tp in powers:
            for pp in powers:
                if dp * tp * pp != n:
                    continue
                try:
                    estimate = scaling.estimate(model, machine, global_batch, dp, tp, pp)
                except ValueError:  # heads, layers or batch do not split this way
                    continue
                if estimate.fits and estimate.tokens_per_second > best_speed:
                    best, best_speed = (dp, tp, pp), estimate.tokens_per_second
    return best
