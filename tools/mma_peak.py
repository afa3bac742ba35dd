"""Tensor-core ceiling of mma.sync.m16n8k8 TF32 on this GPU (the instruction the fast stride-1
kernel uses): every warp issues independent MMAs on register operands, no memory traffic.
Prints TFLOP/s for a few warps-per-SM settings. Reference point for docs/perf-notes.md.

    python tools/mma_peak.py
"""
import torch
from torch.utils.cpp_extension import load_inline

CUDA = r"""
#include <torch/extension.h>
__global__ void __launch_bounds__(256) mma_loop(float* out, int iters) {
  float acc[16][4] = {};
  uint32_t a[4], b[2];
  for (int k = 0; k < 4; ++k) a[k] = __float_as_uint(1.0f + threadIdx.x * 1e-7f * k);
  b[0] = __float_as_uint(0.5f); b[1] = __float_as_uint(0.25f);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int j = 0; j < 16; ++j)
      asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                   : "+f"(acc[j][0]), "+f"(acc[j][1]), "+f"(acc[j][2]), "+f"(acc[j][3])
                   : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
  }
  float s = 0.f;
  for (int j = 0; j < 16; ++j) s += acc[j][0] + acc[j][1] + acc[j][2] + acc[j][3];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
void run(torch::Tensor out, int64_t blocks, int64_t threads, int64_t iters) {
  mma_loop<<<blocks, threads>>>(out.data_ptr<float>(), iters);
}
"""
ext = load_inline("mma_peak", cpp_sources="void run(torch::Tensor out, int64_t blocks, int64_t threads, int64_t iters);",
                  cuda_sources=CUDA, functions=["run"], extra_cuda_cflags=["-O3"])
sms = torch.cuda.get_device_properties(0).multi_processor_count
out = torch.empty(sms * 8 * 256, device="cuda")
iters = 4096
for warps_per_sm in (4, 8, 16, 32):
    threads = 128 if warps_per_sm == 4 else 256
    blocks = sms * warps_per_sm * 32 // threads
    ext.run(out, blocks, threads, iters)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    ext.run(out, blocks, threads, iters)
    end.record()
    torch.cuda.synchronize()
    ms = start.elapsed_time(end)
    flops = blocks * threads / 32 * iters * 16 * 2 * 16 * 8 * 8
    print(f"{torch.cuda.get_device_name()}: {warps_per_sm:2d} warps/SM: {flops / ms / 1e9:7.1f} TFLOP/s "
          f"({ms:.3f} ms)")
