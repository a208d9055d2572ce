"""The team's version, for comparison: two cuBLAS FP8 GEMMs (`torch._scaled_mm`, fp32
out) and the SiLU-multiply, captured in a CUDA graph per set of tensors (the capture
and a warm-up run happen at the first call for a shape).

    custom_kernel((a, b1, b2, scale_a, scale_b1, scale_b2, c)) -> c
"""
import torch
import torch.nn.functional as F

_graphs = {}


def _run(a, b1, b2, scale_a, scale_b1, scale_b2, c):
    r1 = torch._scaled_mm(a, b1.t(), scale_a=scale_a, scale_b=scale_b1, out_dtype=torch.float32)
    r2 = torch._scaled_mm(a, b2.t(), scale_a=scale_a, scale_b=scale_b2, out_dtype=torch.float32)
    c.copy_(F.silu(r1) * r2)


def custom_kernel(data):
    key = tuple(t.data_ptr() for t in data) + tuple(data[0].shape) + tuple(data[1].shape)
    graph = _graphs.get(key)
    if graph is None:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            _run(*data)  # warm-up: cuBLAS picks its algorithm and allocates outside the capture
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            _run(*data)
        _graphs[key] = graph
    graph.replay()
    return data[6]
