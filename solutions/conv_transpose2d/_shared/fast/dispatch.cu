// The fast ConvTranspose2d kernels' entry points: conv_transpose2d_fast (run a call) and
// conv_transpose2d_plan (say what a call would run, launching nothing). Both go through the one
// rule below, kRoutes. ct2d_fast.py builds this file with the headers it includes (the folder is
// on the include path) and binds both functions.
//
// The kernel families, one header each:
//   mma.cuh    ct2d_mma, ct2d_mmh: implicit GEMM on mma.sync (stride 1, one group)
//   wgmma.cuh  ct2d_wg, ct2d_wgs (+ operand policies for TF32, 3xFP16, 1xFP16): implicit GEMM on
//              the Hopper warpgroup MMA (stride 1, one group; sm_90a builds only)
//   convert.cuh wgh_amax, fp16_convert: the fp16 pre-passes of the wgmma fp16 kernels
//   phase.cuh  ct2d_phase: every other shape (strided, grouped, dilated, any channel count);
//              ct2d_phase_epi: the same with an elementwise epilogue in its store
//   epilogue.cuh the elementwise epilogues of the fused family, and epilogue_pass for the routes
//              that do not fuse one
//   common.cuh what all of them share (PTX wrappers, barriers, TMA, TF32/fp16 conversions, stores)
// Weights arrive packed once per weight version by ct2d_pack.py, one layout per family.
//
// Classes: split 1 is the TF32 class (fast), split 3 the fp32 class (fast_fp32); a bf16 x (fast_bf16)
// runs the TF32-class kernels, whose products are exact for bf16 values, and gets bf16 back.
// config 0 lets the rule choose; 1..9 are tuning hooks that force a variant (tools/ab_variants.py,
// tools/bench_fast.py), named where the routes test them.
// Epilogue (the fused family, KernelBench level 2): an elementwise function applied to every output
// element after the bias (epilogue.cuh). Row 6 applies it in its store (TF32 class, fp32, config 0);
// after any other row it is a pass of its own over the output. plan() says which. A bf16 call with
// an epilogue runs the fp32 rule on x widened, so that the epilogue takes the fp32 sums and the
// result is rounded once (the bf16 rows round the sums first).
#include "common.cuh"
#include "mma.cuh"
#include "convert.cuh"
#include "wgmma.cuh"
#include "epilogue.cuh"
#include "phase.cuh"

#include <string>
#include <vector>

namespace {

// One call: its tensors and hyper-parameters, the output once allocated, and what runs.
struct Call {
  torch::Tensor x, wp, wt, wm, wmh, wg, wh, wb, y;  // wb: bf16 weight parts (a bf16 weight), else empty
  int64_t wmh_exp, wh_exp;
  const float* b;  // bias (fp32) or null
  int64_t Cout, KH, KW, sh, sw, ph, pw, oph, opw, dh, dw, groups, split, config;
  Epilogue epi;      // kind kEpiNone: none
  bool epi_fused;    // the route that ran applied it
  bool out_fp16;     // y in fp16 (an fp32 x, no epilogue): a row marked fp16_out writes it, else y rounded once
  cudaStream_t stream;
  Plan plan;

  bool stride1_one_group() const { return sh == 1 && sw == 1 && groups == 1; }
  bool bf16() const { return x.scalar_type() == at::kBFloat16; }
  bool sm90a() const {
#if defined(CT2D_WGMMA)
    return true;
#else
    return false;
#endif
  }
};

// A row of the rule: where it applies (shapes, class, build, tuning hook, the weights the Python
// side packed), whether it takes a bf16 x, whether it writes an fp16 y, and the run, which returns
// false where its kernel's shared-memory plan does not fit (the next row then gets the call).
struct Route {
  const char* kernel;
  bool bf16;
  bool fp16_out;
  bool (*applies)(const Call&);
  bool (*run)(Call&);
};

bool run_phase_tc(Call& c);
bool run_phase_fma(Call& c);

// The rule: the first row that applies and fits runs. A bf16 call tries only the rows marked bf16,
// and only in the TF32 class with config 0 (or 9) and no epilogue; if none fits it runs the whole rule on x widened to
// fp32 (exact) and its output is rounded once to bf16 (io "bf16 via fp32"). A call for an fp16
// output (out_fp16, e.g. a fused solution's intermediate) tries only row 1, which writes it; else
// the whole rule runs with an fp32 output, rounded once to fp16 (io "fp16 via fp32").
//
// | row | kernel (file)                   | stride, groups | output channels       | class | build  | x     |
// |-----|---------------------------------|----------------|-----------------------|-------|--------|-------|
// | 1   | ct2d_wgf (wgmma.cuh)            | 1, 1           | > 32                  | tf32  | sm_90a | fp32, bf16 |
// | 2   | ct2d_wgh (wgmma.cuh)            | 1, 1           | > 32                  | fp32  | sm_90a | fp32 |
// | 3   | ct2d_wg / ct2d_wgs TF32         | 1, 1           | > 32 (config 5, 6, 8: any) | tf32 | sm_90a | fp32 |
// | 4   | ct2d_mmh / ct2d_mma (mma.cuh)   | 1, 1           | multiple of 32; 3x3, 3x5, 3x7 kernels | both | any | fp32, bf16 (mmh) |
// | 5   | ct2d_wg / ct2d_wgs TF32         | 1, 1           | any (where row 4 does not apply) | tf32 | sm_90a | fp32 |
// | 6   | ct2d_phase TF32 (phase.cuh)     | any            | any                   | tf32  | any    | fp32, bf16 (not stride 1 with one group) |
// | 7   | ct2d_phase 3xTF32 (one entry with row 6) | any   | any                   | fp32  | any    | fp32 |
// | 8   | ct2d_phase on CUDA cores (fp32 FMAs) | any       | any                   | both  | any    | fp32 |
//
// Why this order: with more than 32 output channels the wgmma kernels fill their 64-row MMAs and
// are the fastest (rows 1-3); with 32 or fewer, half of the wgmma's rows would idle, and mma.sync
// measured faster on 71 and 78 (row 4). The phase kernel skips the zeros a stride inserts, so it
// takes every strided or grouped shape; its tensor-core variants need the weights' fragments in
// shared memory, and row 8 takes what they do not fit.
const Route kRoutes[] = {
    {"ct2d_wgf", true, true,  // a bf16 x: bf16 products on its bf16 parts (wb), else (config 0) the fp16 ones
     [](const Call& c) {
       return c.sm90a() && c.stride1_one_group() && (c.config == 0 || (c.config == 9 && c.bf16())) && c.Cout > 32 &&
              (c.wh.numel() > 0 || (c.bf16() && c.wb.numel() > 0)) && c.split == 1;
     },
     [](Call& c) {
       if (c.bf16() && c.wb.numel() > 0 &&
           run_wgf(c.x, c.wb, 0, c.b, c.y, c.KH, c.KW, c.ph, c.pw, c.dh, c.dw, c.stream, c.plan))
         return true;
       return (!c.bf16() || c.config == 0) && c.wh.numel() > 0 &&
              run_wgf(c.x, c.wh, c.wh_exp, c.b, c.y, c.KH, c.KW, c.ph, c.pw, c.dh, c.dw, c.stream, c.plan);
     }},
    {"ct2d_wgh", false, false,
     [](const Call& c) { return c.sm90a() && c.stride1_one_group() && c.config == 0 && c.Cout > 32 && c.wh.numel() > 0 && c.split == 3; },
     [](Call& c) { return run_wgh(c.x, c.wh, c.wh_exp, c.b, c.y, c.KH, c.KW, c.ph, c.pw, c.dh, c.dw, c.stream, c.plan); }},
    {"ct2d_wg", false, false,
     [](const Call& c) {
       return c.sm90a() && c.stride1_one_group() && c.split == 1 && c.wg.numel() > 0 &&
              ((c.config == 0 && c.Cout > 32) || c.config == 5 || c.config == 6 || c.config == 8);
     },
     [](Call& c) { return run_wg(c.x, c.wg, c.b, c.y, c.KH, c.KW, c.ph, c.pw, c.dh, c.dw, c.config, c.stream, c.plan); }},
    {"ct2d_mma", true, false,  // a bf16 x: ct2d_mmh only, its bf16 MMAs on x as it is, else (config 0) x widened
     [](const Call& c) { return c.stride1_one_group() && c.wm.numel() > 0; },
     [](Call& c) {
       auto run = [&](const torch::Tensor& x) {
         return run_mma(x, c.wm, c.wmh, c.wmh_exp, c.b, c.y, c.KH, c.KW, c.ph, c.pw, c.dh, c.dw, c.split, c.config,
                        c.stream, c.plan);
       };
       return run(c.x) || (c.bf16() && c.config == 0 && run(c.x.to(at::kFloat)));
     }},
    {"ct2d_wg", false, false,
     [](const Call& c) { return c.sm90a() && c.stride1_one_group() && c.split == 1 && c.wg.numel() > 0 && c.config == 0; },
     [](Call& c) { return run_wg(c.x, c.wg, c.b, c.y, c.KH, c.KW, c.ph, c.pw, c.dh, c.dw, 0, c.stream, c.plan); }},
    {"ct2d_phase", true, false,  // tensor cores (TF32 for split 1, 3xTF32 for split 3); a bf16 call only off stride 1
     [](const Call& c) { return (c.config == 0 || c.config >= 4) && c.wt.numel() > 0 && !(c.bf16() && c.stride1_one_group()); },
     run_phase_tc},
    {"ct2d_phase", false, false,  // CUDA cores; an error naming the direct solution where even this does not fit
     [](const Call&) { return true; }, run_phase_fma},
};

PhaseShape phase_shape(const Call& c) {
  TORCH_CHECK(c.sw <= kMaxStride && c.KH <= kMaxTaps && c.KW <= kMaxTaps,
              "fast phase kernel: stride_w <= 16 and kernel sizes <= 32 (use the direct solution)");
  PhaseShape s{};
  s.N = c.x.size(0); s.Cin = c.x.size(1); s.Hin = c.x.size(2); s.Win = c.x.size(3);
  s.Cout = c.Cout; s.Hout = c.y.size(2); s.Wout = c.y.size(3);
  s.KH = c.KH; s.KW = c.KW; s.sh = c.sh; s.sw = c.sw; s.ph = c.ph; s.pw = c.pw;
  s.dh = c.dh; s.dw = c.dw; s.groups = c.groups;
  s.cin_g = s.Cin / c.groups;
  s.cout_g = c.Cout / c.groups;
  for (int r = 0; r < c.sh; ++r) {
    int n = 0;
    for (int kh = 0; kh < c.KH; ++kh) n += pos_mod(r + c.ph - kh * c.dh, c.sh) == 0;
    s.khn_max = std::max(s.khn_max, n);
  }
  return s;
}

// Row 6/7: the tensor-core phase kernel, sized for three blocks per SM (config 7: two, 8: four).
bool run_phase_tc(Call& c) {
  const PhaseShape s = phase_shape(c);
  if (c.epi.kind != kEpiNone && c.split == 1 && !c.bf16() && c.config == 0) {  // the epilogue in the store
    c.epi_fused = true;
    return launch_phase<4, 16, 1, 3, float, true>(c.x, c.wt, c.b, c.y, s, c.stream, c.plan, c.epi);
  }
  if (c.bf16())  // config 9: the bf16 MMA (issue 77, until measured), else TF32 on the widened x
    return c.config == 9 ? launch_phase<4, 16, 2, 3, __nv_bfloat16>(c.x, c.wt, c.b, c.y, s, c.stream, c.plan)
                         : launch_phase<4, 16, 1, 3, __nv_bfloat16>(c.x, c.wt, c.b, c.y, s, c.stream, c.plan);
  auto launch = [&](auto tc) {
    constexpr int TC = decltype(tc)::value;
    return c.config == 7   ? launch_phase<4, 16, TC, 2>(c.x, c.wt, c.b, c.y, s, c.stream, c.plan)
           : c.config == 8 ? launch_phase<4, 16, TC, 4>(c.x, c.wt, c.b, c.y, s, c.stream, c.plan)
                           : launch_phase<4, 16, TC, 3>(c.x, c.wt, c.b, c.y, s, c.stream, c.plan);
  };
  return c.split == 1 ? launch(std::integral_constant<int, 1>{}) : launch(std::integral_constant<int, 3>{});
}

// Row 8: the CUDA-core phase kernel, (P, CT) = pixels x channels per thread: config 1..3 force
// (4, 8), (2, 8), (1, 4); config 0 (and 4..9) choose (1, 4) for fewer than 8 channels per group,
// (4, 8) where 128-pixel blocks waste at most a fifth of a row phase, else (2, 8).
bool run_phase_fma(Call& c) {
  const PhaseShape s = phase_shape(c);
  int cfg = c.config >= 4 ? 0 : c.config;
  if (cfg == 0) {
    const int per_phase = (s.Wout + c.sw - 1) / c.sw;
    if (s.cout_g < 8) cfg = 3;
    else if (per_phase >= 96 && (per_phase + 127) / 128 * 128 <= 1.2 * per_phase) cfg = 1;
    else cfg = 2;
  }
  const bool fits = cfg == 1   ? launch_phase<4, 8, 0, 2>(c.x, c.wp, c.b, c.y, s, c.stream, c.plan)
                    : cfg == 2 ? launch_phase<2, 8, 0, 2>(c.x, c.wp, c.b, c.y, s, c.stream, c.plan)
                               : launch_phase<1, 4, 0, 2>(c.x, c.wp, c.b, c.y, s, c.stream, c.plan);
  TORCH_CHECK(fits, "fast phase kernel: too many input channels per group or kernel taps for shared memory "
                    "(use the direct solution)");
  return true;
}

// Runs (or, with c.plan.launch false, plans) the call: checks, the output, then the first route
// that applies and fits. Returns y.
torch::Tensor execute(Call& c) {
  TORCH_CHECK(c.x.is_cuda() && c.wp.is_cuda(), "x and the packed weight must be CUDA tensors");
  TORCH_CHECK((c.x.scalar_type() == at::kFloat || c.bf16()) && c.wp.scalar_type() == at::kFloat,
              "x float32 or bfloat16, the packed weights float32");
  TORCH_CHECK(c.x.dim() == 4, "expected a 4-D input");
  TORCH_CHECK(c.split == 1 || c.split == 3, "split must be 1 (TF32) or 3 (3xTF32)");
  TORCH_CHECK(c.config >= 0 && c.config <= 9, "config must be 0..9");
  c.x = c.x.contiguous();
  c.wp = c.wp.contiguous();
  const int64_t N = c.x.size(0), Cin = c.x.size(1), Hin = c.x.size(2), Win = c.x.size(3);
  const int64_t Cout = c.Cout, KH = c.KH, KW = c.KW, groups = c.groups;
  TORCH_CHECK(groups >= 1 && Cin % groups == 0 && Cout % groups == 0, "channels must divide by groups");
  TORCH_CHECK(c.wp.size(0) == Cin && c.wp.size(1) == KH * KW && c.wp.size(2) == Cout / groups, "packed weight shape");
  TORCH_CHECK(c.wt.numel() == 0 || (c.wt.is_cuda() && c.wt.is_contiguous() &&
                                     c.wt.numel() == groups * ((Cout / groups + 15) / 16) * KH * KW *
                                                         ((Cin / groups + 7) / 8) * 256),
              "tensor-core phase weights: expected (groups, ceil(Cout/groups/16), KH, KW, ceil(Cin/groups/8), 2, 32, 4)");
  const int64_t Hout = (Hin - 1) * c.sh - 2 * c.ph + c.dh * (KH - 1) + c.oph + 1;
  const int64_t Wout = (Win - 1) * c.sw - 2 * c.pw + c.dw * (KW - 1) + c.opw + 1;
  TORCH_CHECK(Hout > 0 && Wout > 0, "output size is not positive");
  TORCH_CHECK(c.x.numel() < (int64_t(1) << 31) && N * Cout * Hout * Wout < (int64_t(1) << 40), "tensor too large");
  TORCH_CHECK(!c.out_fp16 || (!c.bf16() && c.epi.kind == kEpiNone), "an fp16 output takes an fp32 x and no epilogue");
  c.y = torch::empty({N, Cout, Hout, Wout}, c.x.options().dtype(c.out_fp16 ? at::kHalf : c.x.scalar_type()));
  if (!c.plan.launch) c.plan.io = c.bf16() ? "bf16" : c.out_fp16 ? "fp32 in, fp16 out" : "fp32";
  if (c.y.numel() == 0) {
    if (!c.plan.launch) c.plan.set("none (empty output)", "", "");
    return c.y;
  }
  c.stream = c10::cuda::getCurrentCUDAStream();
  // a bf16 call takes the bf16 rows with config 0 and 9. On stride 1 both run bf16 MMAs on x as it is
  // where they apply (row 1's ct2d_wgf on the weight's bf16 parts, row 4's ct2d_mmh; issue 77: 1.1-1.8x
  // faster than the fp16 products and the widened x on the family's five stride-1 problems, H100), and
  // config 0 falls back to the fp16 products (row 1) and x widened (row 4) where they do not; off
  // stride 1, row 6: config 0 its TF32 variant on x widened as staged, config 9 its bf16 mma.sync.
  // Not with an epilogue: the bf16 rows write bf16, and an epilogue applied after that rounding loses
  // what it cancels (93's x + 0.5 then min(x, 0): near x = -0.5 the bf16 sum's last place, 2^-8, is the
  // whole result; rel L2 0.05 against float64, over the bf16 class's 0.02, H100). The fp32 rule on x
  // widened applies it to the fp32 sums (row 6's store, or a pass over the fp32 output), rounded once.
  const bool bf16_ok = !c.bf16() || (c.split == 1 && (c.config == 0 || c.config == 9) && c.epi.kind == kEpiNone);
  for (const Route& r : kRoutes) {
    if ((c.bf16() && !(r.bf16 && bf16_ok)) || (c.out_fp16 && !r.fp16_out) || !r.applies(c)) continue;
    c.epi_fused = false;
    if (r.run(c)) {
      if (c.epi.kind != kEpiNone && !c.epi_fused) {
        if (c.plan.launch) run_epilogue_pass(c.y, c.epi, c.stream);
        else c.plan.config += strf("; epilogue %s as a pass of its own (epilogue_pass)", fused_epilogue_name(c.epi.kind));
      }
      if (c.plan.launch) C10_CUDA_KERNEL_LAUNCH_CHECK();
      return c.y;
    }
  }
  TORCH_CHECK(c.bf16() || c.out_fp16, "fast ConvTranspose2d: no kernel applies");  // row 8 applies to every fp32 call
  // a bf16 call no bf16 row took: the fp32 rule on x widened (exact), the output rounded once; an
  // fp16 output row 1 did not write: the fp32 rule, its output rounded once
  Call w = c;
  w.x = c.x.to(at::kFloat);
  w.out_fp16 = false;
  torch::Tensor y = execute(w);
  if (!c.plan.launch) {
    c.plan = w.plan;
    c.plan.io = c.bf16() ? "bf16 via fp32" : "fp16 via fp32";
    return c.y;
  }
  return y.to(c.y.scalar_type());
}

// The entry points' arguments (ct2d_fast.py declares the same list for the binding): x, the packed
// weights, the bias, then the layer's hyper-parameters, the class (split), the tuning hook and the
// epilogue (kind and its two scalars; 0: none), and out_fp16 (1: y in fp16, Call::out_fp16).
#define CT2D_ARGS                                                                                             \
  torch::Tensor x, torch::Tensor wp, torch::Tensor wt, torch::Tensor wm, torch::Tensor wmh, int64_t wmh_exp,  \
      torch::Tensor wg, torch::Tensor wh, int64_t wh_exp, torch::Tensor wb, c10::optional<torch::Tensor> bias, \
      int64_t Cout,                                                                                           \
      int64_t KH, int64_t KW, int64_t stride_h, int64_t stride_w, int64_t pad_h, int64_t pad_w,               \
      int64_t outpad_h, int64_t outpad_w, int64_t dil_h, int64_t dil_w, int64_t groups, int64_t split,        \
      int64_t config, int64_t epilogue, double epi_a, double epi_b, int64_t out_fp16
#define CT2D_ARG_NAMES                                                                                        \
  x, wp, wt, wm, wmh, wmh_exp, wg, wh, wh_exp, wb, bias, Cout, KH, KW, stride_h, stride_w, pad_h, pad_w, outpad_h, \
      outpad_w, dil_h, dil_w, groups, split, config, epilogue, epi_a, epi_b, out_fp16

// bias_c keeps a contiguous copy of the bias alive for the call.
Call make_call(CT2D_ARGS, torch::Tensor& bias_c, bool launch) {
  Call c{};
  c.x = x; c.wp = wp; c.wt = wt; c.wm = wm; c.wmh = wmh; c.wg = wg; c.wh = wh; c.wb = wb;
  c.wmh_exp = wmh_exp; c.wh_exp = wh_exp;
  c.Cout = Cout; c.KH = KH; c.KW = KW; c.sh = stride_h; c.sw = stride_w; c.ph = pad_h; c.pw = pad_w;
  c.dh = dil_h; c.dw = dil_w; c.groups = groups; c.split = split; c.config = config;
  c.oph = outpad_h; c.opw = outpad_w;
  TORCH_CHECK(epilogue >= 0 && epilogue < kEpiCount, "epilogue: unknown kind ", epilogue);
  c.epi = Epilogue{(int)epilogue, (float)epi_a, (float)epi_b};
  c.plan.launch = launch;
  c.out_fp16 = out_fp16 != 0;
  c.b = nullptr;
  if (bias.has_value() && bias->defined()) {
    bias_c = bias->contiguous();
    TORCH_CHECK(bias_c.is_cuda() && bias_c.numel() == Cout && bias_c.scalar_type() == at::kFloat,
                "bias must be a float32 CUDA tensor of out_channels elements");
    c.b = bias_c.data_ptr<float>();
  }
  return c;
}

}  // namespace

// x: (N, Cin, H, W) fp32 or bf16 CUDA. The weights as ct2d_pack.py packs them: wp (phase_weights),
// wt (phase_fragments; empty: the CUDA-core phase kernel only), wm (mma_weights), wmh and wmh_exp
// (mma_fp16), wg (wgmma_weights), wh and wh_exp (fp16_parts: hi for split 1, hi and lo for split 3),
// wb (bf16_parts: a bf16 weight's, for ct2d_wgf's bf16 products); wm, wmh, wg, wh and wb may be empty where their kernel does not apply. Returns y.
torch::Tensor conv_transpose2d_fast(CT2D_ARGS) {
  torch::Tensor bias_c;
  Call c = make_call(CT2D_ARG_NAMES, bias_c, true);
  return execute(c);
}

// The same arguments; what conv_transpose2d_fast would run, as [kernel, file, configuration, io],
// with nothing launched (the output and, for a bf16 call on the fp32 rule, x widened are allocated).
std::vector<std::string> conv_transpose2d_plan(CT2D_ARGS) {
  torch::Tensor bias_c;
  Call c = make_call(CT2D_ARG_NAMES, bias_c, false);
  execute(c);
  return {c.plan.kernel, c.plan.file, c.plan.config, c.plan.io};
}
