def lower_leaky_relu(g):
    for node in list(g.nodes):
        if node.op != "aten.leaky_relu.default":
            continue
        x = node.inputs[0]
        args = node.attrs["args"]
        slope = args[1] if len(args) > 1 else 0.01
        out = g.values[node.name]
        scaled = g.add_node("mul", [x], out.shape, out.dtype, {"scalar": float(slope)}, node.source, before=node)
        node.op, node.inputs, node.attrs = "maximum", [x, scaled.name], {}     # 0 < slope < 1
        return 1
    return 0
