// im2col + GEMM. Why it is shaped this way: it is the textbook lowering and the baseline the
// other two algorithms are judged against. The column matrix of one image is (K+1) x P (K =
// C*KH*KW taps, P = output pixels, plus a row of ones), row-major, so each image's output F x P
// is exactly its NCHW slice and one strided-batched GEMM per chunk of images (the weights shared
// with batch stride 0) writes the layer's output in place. Preferred form: all matrices
// row-major (CUBLASLT_ORDER_ROW), so the rows of D are the filters and cuBLASLt's
// CUBLASLT_EPILOGUE_RELU_BIAS / BIAS adds the per-filter bias and applies a following ReLU.
// If cuBLASLt offers no algorithm for that form (cuBLASLt 13.1 on an H100 offers none:
// CUBLAS_STATUS_NOT_SUPPORTED), the same product is computed column-major as D^T = cols^T W^T with the bias
// as weight column K against the row of ones, and CUBLASLT_EPILOGUE_RELU fuses the ReLU: still one GEMM, no
// extra pass. The column buffer is bounded (the caller's workspace), so a chunk holds as many images as fit
// in it. Dilation only moves where a tap reads (kh * DH, kw * DW); grouped convolutions are not
// lowered here (their GEMMs are block-diagonal: cuDNN or the depthwise kernel run them). An
// activation other than ReLU, which no cuBLASLt epilogue computes as PyTorch does, is one in-place
// pass over the chunk's output after its GEMM.
#include <algorithm>
#include <vector>

#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_im2col.h"

namespace cnnrun::gpu {

namespace {

struct ColArgs {
  int C, H, W, KH, KW, SH, SW, PH, PW, DH, DW, OH, OW;
};

// One thread block row per column-matrix row (image, tap), so the tap is decoded once per row
// and the pixels of the row are written coalesced; 32-bit index arithmetic within an image.
__global__ void im2col_kernel(const float* __restrict__ x, float* __restrict__ col, int rows, ColArgs a) {
  const int P = a.OH * a.OW, K = a.C * a.KH * a.KW;
  for (int row = blockIdx.y; row < rows; row += gridDim.y) {
    const int img = row / (K + 1), k = row % (K + 1);
    float* dst = col + static_cast<int64_t>(row) * P;
    if (k == K) {
      for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < P; p += gridDim.x * blockDim.x) dst[p] = 1.f;
      continue;
    }
    const int kw = k % a.KW, kh = (k / a.KW) % a.KH, c = k / (a.KW * a.KH);
    const float* src = x + (static_cast<int64_t>(img) * a.C + c) * a.H * a.W;
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < P; p += gridDim.x * blockDim.x) {
      const int oy = p / a.OW, ox = p - oy * a.OW;
      const int iy = oy * a.SH - a.PH + kh * a.DH, ix = ox * a.SW - a.PW + kw * a.DW;
      dst[p] = (iy >= 0 && iy < a.H && ix >= 0 && ix < a.W) ? __ldg(src + iy * a.W + ix) : 0.f;
    }
  }
}

bool relu_epilogue(const ActFn& a) { return a.kind == Act::kRelu; }

}  // namespace

bool im2col_can_run(const ConvParams& p, std::string* why) {
  if (p.groups == 1) return true;
  if (why)
    *why = "grouped convolution (" + std::to_string(p.groups) +
           " groups): im2col lowers dense convolutions only; cudnn and depthwise run grouped ones";
  return false;
}

Im2colConv::Im2colConv(const ConvParams& p, ActFn act, const float* weight, const float* bias,
                       const float* dev_bias)
    : p_(p), act_(act), bias_(dev_bias) {
  std::string why;
  if (!im2col_can_run(p, &why)) throw Error("im2col convolution: " + why);
  const int64_t F = p.filters, K = p.in_c * p.kernel_h * p.kernel_w;
  std::vector<float> ext(static_cast<size_t>(F * (K + 1)));
  for (int64_t f = 0; f < F; ++f) {
    std::copy(weight + f * K, weight + (f + 1) * K, ext.begin() + f * (K + 1));
    ext[static_cast<size_t>(f * (K + 1) + K)] = bias[f];
  }
  w_ext_ = upload(ext.data(), ext.size());
}

size_t Im2colConv::col_bytes_per_image() const {
  return static_cast<size_t>((p_.in_c * p_.kernel_h * p_.kernel_w + 1) * p_.out_h * p_.out_w) * sizeof(float);
}

Im2colConv::Plan& Im2colConv::plan(cublasLtHandle_t lt, int64_t images, size_t ws_bytes) {
  auto it = plans_.find(images);
  if (it != plans_.end()) return *it->second;
  auto pl = std::make_unique<Plan>();
  const int64_t F = p_.filters, K = p_.in_c * p_.kernel_h * p_.kernel_w, P = p_.out_h * p_.out_w;
  GemmSpec s;  // row-major: D (F x P) = W (F x K) * cols (K x P), bias per row of D
  s.batch = static_cast<int>(images);
  s.row_major = true;
  s.m = F, s.n = P, s.k = K;
  s.lda = K, s.stride_a = 0;
  s.ldb = P, s.stride_b = (K + 1) * P;
  s.ldd = P, s.stride_d = F * P;
  s.epilogue = relu_epilogue(act_) ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  s.bias = bias_;
  s.precision = prec_;
  pl->bias_epilogue = pl->gemm.init(lt, s, ws_bytes);
  if (!pl->bias_epilogue) {
    GemmSpec c;  // column-major: D^T (P x F) = cols^T (P x K+1) * [W | bias]^T (K+1 x F)
    c.batch = static_cast<int>(images);
    c.m = P, c.n = F, c.k = K + 1;
    c.lda = P, c.stride_a = (K + 1) * P;
    c.ldb = K + 1, c.stride_b = 0;
    c.ldd = P, c.stride_d = F * P;
    c.epilogue = relu_epilogue(act_) ? CUBLASLT_EPILOGUE_RELU : CUBLASLT_EPILOGUE_DEFAULT;
    c.precision = prec_;
    if (!pl->gemm.init(lt, c, ws_bytes))
      throw Error("im2col convolution: cuBLASLt has no " + std::string(precision_name(prec_)) +
                  " algorithm for a " + std::to_string(F) + "x" + std::to_string(K) + " by " +
                  std::to_string(K) + "x" + std::to_string(P) + " batched GEMM");
  }
  return *plans_.emplace(images, std::move(pl)).first->second;
}

void Im2colConv::forward(cublasLtHandle_t lt, const float* x, const float* w, float* y, int64_t n, float* col,
                         size_t col_bytes, void* ws, size_t ws_bytes, cudaStream_t s) {
  const size_t per = col_bytes_per_image();
  int64_t chunk = static_cast<int64_t>(col_bytes / per);
  if (chunk < 1) throw Error("im2col convolution: the column buffer holds no image");
  if (chunk > n) chunk = n;
  const int64_t in_img = p_.in_c * p_.in_h * p_.in_w, out_img = p_.filters * p_.out_h * p_.out_w;
  const int64_t K = p_.in_c * p_.kernel_h * p_.kernel_w, P = p_.out_h * p_.out_w;
  const ColArgs a{
      static_cast<int>(p_.in_c),       static_cast<int>(p_.in_h),       static_cast<int>(p_.in_w),
      static_cast<int>(p_.kernel_h),   static_cast<int>(p_.kernel_w),   static_cast<int>(p_.stride_h),
      static_cast<int>(p_.stride_w),   static_cast<int>(p_.pad_h),      static_cast<int>(p_.pad_w),
      static_cast<int>(p_.dilation_h), static_cast<int>(p_.dilation_w), static_cast<int>(p_.out_h),
      static_cast<int>(p_.out_w)};
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t g = std::min(chunk, n - i0);
    const int64_t rows = g * (K + 1);
    if (rows > 0x7fffffff) throw Error("im2col convolution: column matrix too large");
    dim3 grid(static_cast<unsigned>(std::min<int64_t>((P + 255) / 256, 64)),
              static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
    im2col_kernel<<<grid, 256, 0, s>>>(x + i0 * in_img, col, static_cast<int>(rows), a);
    CUDA_CHECK_LAUNCH("im2col_kernel");
    Plan& pl = plan(lt, g, ws_bytes);
    last_bias_epilogue_ = pl.bias_epilogue;
    if (pl.bias_epilogue)
      pl.gemm.run(lt, w, col, y + i0 * out_img, ws, ws_bytes, s);
    else
      pl.gemm.run(lt, col, w_ext_.as<float>(), y + i0 * out_img, ws, ws_bytes, s);
    if (act_.kind != Act::kIdentity && !relu_epilogue(act_))
      launch_act(y + i0 * out_img, y + i0 * out_img, g * out_img, act_, s);
  }
}

void Im2colConv::set_precision(Precision p) {
  if (p != prec_) plans_.clear();
  prec_ = p;
}

std::string Im2colConv::algo_name() const {
  const std::string relu = relu_epilogue(act_) ? "+relu" : "";
  const std::string pass =
      act_.kind != Act::kIdentity && !relu_epilogue(act_) ? "+" + act_fn_name(act_) + " pass" : "";
  return (last_bias_epilogue_
              ? "im2col+gemm(epilogue bias" + relu + ")"
              : "im2col+gemm(bias as K row" + (relu.empty() ? std::string(")") : ", epilogue relu)")) +
         pass + precision_tag(prec_);
}

}  // namespace cnnrun::gpu
