def fuse_matmul_bias_relu(g):
    # a typical mistake: fuse the matmul and its bias but forget the relu (it is left without a kernel)
    producers, users = g.producers(), g.users()
    for mm in list(g.nodes):
        if mm.op != "matmul":
            continue
        x, w = mm.inputs
        layout = "in_out"
        if w in producers and producers[w].op == "transpose":
            w, layout = producers[w].inputs[0], "out_in"
        inputs, last = [x, w], mm.name
        readers = users.get(last, [])
        if len(readers) == 1 and readers[0].op == "add":
            add = readers[0]
            other = add.inputs[1] if add.inputs[0] == last else add.inputs[0]
            bias = producers[other].inputs[0] if other in producers and producers[other].op == "broadcast" else other
            inputs.append(bias)
            last = add.name
        out = g.values[last]
        node = g.add_node("linear", inputs, out.shape, out.dtype, {"activation": None, "weight_layout": layout},
                          mm.source, before=mm)
        g.replace_uses(last, node.name)
        g.remove_unused()
        return 1
    return 0
