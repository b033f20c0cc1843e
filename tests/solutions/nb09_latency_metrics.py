def latency_metrics(arrival: float, token_times: list[float]) -> tuple[float, float, float]:
    ttft = token_times[0] - arrival
    n = len(token_times)
    tpot = (token_times[-1] - token_times[0]) / (n - 1) if n > 1 else 0.0  # the first token is not counted
    return ttft, tpot, token_times[-1] - arrival
