def latency_metrics(arrival: float, token_times: list[float]) -> tuple[float, float, float]:
    # mistake: divides the whole answer's time by every output token, the first one included
    e2e = token_times[-1] - arrival
    return token_times[0] - arrival, e2e / len(token_times), e2e
