def lower_leaky_relu(g):
    # a typical mistake: a plain relu (the negative side's slope forgotten)
    for node in list(g.nodes):
        if node.op != "aten.leaky_relu.default":
            continue
        node.op, node.inputs, node.attrs = "relu", [node.inputs[0]], {}
        return 1
    return 0
