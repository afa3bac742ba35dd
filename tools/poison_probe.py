"""Probe: does a NaN-filled, freed block end up under the next torch.empty? (device diagnostics)"""
import os

import torch

from harness.verdict.guards import poison_free_memory

print("alloc conf:", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), torch.cuda.get_allocator_backend())
a = torch.randn(4, 262144, device="cuda")
for trial in range(3):
    poison_free_memory("cuda", 4 << 20)
    out = torch.empty_like(a)
    print("after poison_free_memory: nan fraction", torch.isnan(out).float().mean().item(), out.data_ptr())
    del out
blk = torch.empty(1 << 28, device="cuda")
print("block ptr", blk.data_ptr())
blk.fill_(float("nan"))
del blk
out = torch.empty_like(a)
print("no empty_cache: nan fraction", torch.isnan(out).float().mean().item(), out.data_ptr())
print(torch.cuda.memory_stats().get("num_alloc_retries"), torch.cuda.memory_summary()[:1500])
c = torch.randn(3, 1000, device="cuda")
for trial in range(2):
    poison_free_memory("cuda", 4 << 20)
    for like in (a, c):
        out = torch.empty_like(like)
        print("after poison:", tuple(like.shape), "nan fraction", torch.isnan(out).float().mean().item())
        del out
