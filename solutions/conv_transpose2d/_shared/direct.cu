// General direct ConvTranspose2d (gather formulation), fp32 accumulation.
//
// One thread per output element (n, oc, oh, ow), ow fastest so a warp reads consecutive input
// columns. For tap (kh, kw) the contributing input pixel is
//     ih = (oh + pad_h - kh * dil_h) / stride_h   when the numerator is >= 0 and divisible,
// likewise for iw; weight layout (Cin, Cout/groups, kh, kw). Handles stride, padding,
// output_padding (via the output size), dilation, groups and an optional bias. Every output
// element is written exactly once.
#include <torch/extension.h>
#include <c10/cuda/CUDAStream.h>
#include <c10/cuda/CUDAException.h>

template <typename scalar_t>
__global__ void conv_transpose2d_direct_kernel(
    const scalar_t* __restrict__ x, const scalar_t* __restrict__ w, const scalar_t* __restrict__ bias,
    scalar_t* __restrict__ y,
    int N, int Cin, int Hin, int Win, int Cout, int Hout, int Wout, int KH, int KW,
    int stride_h, int stride_w, int pad_h, int pad_w, int dil_h, int dil_w, int groups) {
  const int64_t total = (int64_t)N * Cout * Hout * Wout;
  const int cin_g = Cin / groups;
  const int cout_g = Cout / groups;
  for (int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x; idx < total;
       idx += (int64_t)gridDim.x * blockDim.x) {
    const int ow = (int)(idx % Wout);
    int64_t t = idx / Wout;
    const int oh = (int)(t % Hout);
    t /= Hout;
    const int oc = (int)(t % Cout);
    const int n = (int)(t / Cout);
    const int g = oc / cout_g;
    const int ocg = oc - g * cout_g;
    scalar_t acc = bias ? bias[oc] : scalar_t(0);
    for (int kh = 0; kh < KH; ++kh) {
      const int hnum = oh + pad_h - kh * dil_h;
      if (hnum < 0 || hnum % stride_h != 0) continue;
      const int ih = hnum / stride_h;
      if (ih >= Hin) continue;
      for (int kw = 0; kw < KW; ++kw) {
        const int wnum = ow + pad_w - kw * dil_w;
        if (wnum < 0 || wnum % stride_w != 0) continue;
        const int iw = wnum / stride_w;
        if (iw >= Win) continue;
        const scalar_t* xp = x + (((int64_t)n * Cin + (int64_t)g * cin_g) * Hin + ih) * Win + iw;
        const scalar_t* wp = w + (((int64_t)g * cin_g * cout_g + ocg) * KH + kh) * KW + kw;
        const int64_t xs = (int64_t)Hin * Win;
        const int64_t ws = (int64_t)cout_g * KH * KW;
        for (int ic = 0; ic < cin_g; ++ic) acc += xp[ic * xs] * wp[ic * ws];
      }
    }
    y[idx] = acc;
  }
}

torch::Tensor conv_transpose2d_direct(torch::Tensor x, torch::Tensor w, c10::optional<torch::Tensor> bias,
                                      int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,
                                      int64_t outpad_h, int64_t outpad_w, int64_t dil_h, int64_t dil_w,
                                      int64_t groups) {
  TORCH_CHECK(x.is_cuda() && w.is_cuda(), "x and weight must be CUDA tensors");
  TORCH_CHECK(x.dim() == 4 && w.dim() == 4, "expected 4-D input (N, Cin, H, W) and weight (Cin, Cout/g, kh, kw)");
  TORCH_CHECK(x.scalar_type() == w.scalar_type(), "x and weight dtypes differ");
  x = x.contiguous();
  w = w.contiguous();
  const int64_t N = x.size(0), Cin = x.size(1), Hin = x.size(2), Win = x.size(3);
  const int64_t KH = w.size(2), KW = w.size(3);
  TORCH_CHECK(w.size(0) == Cin, "weight.size(0) must equal in_channels");
  TORCH_CHECK(groups >= 1 && Cin % groups == 0, "in_channels must be divisible by groups");
  const int64_t Cout = w.size(1) * groups;
  const int64_t Hout = (Hin - 1) * stride_h - 2 * pad_h + dil_h * (KH - 1) + outpad_h + 1;
  const int64_t Wout = (Win - 1) * stride_w - 2 * pad_w + dil_w * (KW - 1) + outpad_w + 1;
  TORCH_CHECK(Hout > 0 && Wout > 0, "output size is not positive");
  torch::Tensor b;
  if (bias.has_value() && bias->defined()) {
    b = bias->contiguous();
    TORCH_CHECK(b.is_cuda() && b.numel() == Cout, "bias must be a CUDA tensor of out_channels elements");
  }
  auto y = torch::empty({N, Cout, Hout, Wout}, x.options());
  const int64_t total = y.numel();
  if (total == 0) return y;
  const int threads = 256;
  const int64_t blocks = std::min<int64_t>((total + threads - 1) / threads, (int64_t)1 << 30);
  auto stream = c10::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "conv_transpose2d_direct", [&] {
    conv_transpose2d_direct_kernel<scalar_t><<<blocks, threads, 0, stream>>>(
        x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), b.defined() ? b.data_ptr<scalar_t>() : nullptr,
        y.data_ptr<scalar_t>(), N, Cin, Hin, Win, Cout, Hout, Wout, KH, KW, stride_h, stride_w, pad_h, pad_w,
        dil_h, dil_w, groups);
  });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
  return y;
}
