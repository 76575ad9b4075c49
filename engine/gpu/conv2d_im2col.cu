// im2col + GEMM. Why it is shaped this way: it is the textbook lowering and the baseline the
// other two algorithms are judged against. The column matrix of one image is K x P (K =
// C*KH*KW taps, P = output pixels), row-major, so that with the weights as a row-major F x K
// matrix each image's output F x P is exactly its NCHW slice: one strided-batched GEMM per
// chunk of images (the weights shared with batch stride 0) writes the layer's output in place,
// and with all matrices row-major (CUBLASLT_ORDER_ROW) the rows of D are the filters, so the
// cuBLASLt bias epilogue adds the per-filter bias and applies a following ReLU. If cuBLASLt
// offers no algorithm for that form, the column-major transpose of the same product is used and
// the bias and activation run as one extra elementwise pass. The column buffer is bounded (the
// caller's workspace), so a chunk holds as many images as fit in it.
#include "engine/gpu/check.h"
#include "engine/gpu/conv2d_im2col.h"
#include "engine/gpu/kernels.h"

namespace cnnrun::gpu {

namespace {

struct ColArgs {
  int C, H, W, KH, KW, SH, SW, PH, PW, OH, OW;
};

__global__ void im2col_kernel(const float* __restrict__ x, float* __restrict__ col, int64_t count, ColArgs a) {
  const int64_t P = static_cast<int64_t>(a.OH) * a.OW;
  const int64_t K = static_cast<int64_t>(a.C) * a.KH * a.KW;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < count; i += int64_t(gridDim.x) * blockDim.x) {
    int64_t p = i % P, t = i / P;
    int k = static_cast<int>(t % K);
    int64_t img = t / K;
    int kw = k % a.KW, kh = (k / a.KW) % a.KH, c = k / (a.KW * a.KH);
    int ox = static_cast<int>(p % a.OW), oy = static_cast<int>(p / a.OW);
    int iy = oy * a.SH - a.PH + kh, ix = ox * a.SW - a.PW + kw;
    float v = 0.f;
    if (iy >= 0 && iy < a.H && ix >= 0 && ix < a.W) v = __ldg(x + ((img * a.C + c) * a.H + iy) * a.W + ix);
    col[i] = v;
  }
}

}  // namespace

Im2colConv::Im2colConv(const ConvParams& p, ActKind act, const float* bias) : p_(p), act_(act), bias_(bias) {
  if (act != ActKind::kNone && act != ActKind::kRelu)
    throw Error("im2col convolution: only a ReLU can be fused into the cuBLASLt epilogue");
}

size_t Im2colConv::col_bytes_per_image() const {
  return static_cast<size_t>(p_.in_c * p_.kernel_h * p_.kernel_w * p_.out_h * p_.out_w) * sizeof(float);
}

Im2colConv::Plan& Im2colConv::plan(cublasLtHandle_t lt, int64_t images, size_t ws_bytes) {
  auto it = plans_.find(images);
  if (it != plans_.end()) return *it->second;
  auto pl = std::make_unique<Plan>();
  const int64_t F = p_.filters, K = p_.in_c * p_.kernel_h * p_.kernel_w, P = p_.out_h * p_.out_w;
  GemmSpec s;
  s.batch = static_cast<int>(images);
  s.row_major = true;
  s.m = F, s.n = P, s.k = K;
  s.lda = K, s.stride_a = 0;
  s.ldb = P, s.stride_b = K * P;
  s.ldd = P, s.stride_d = F * P;
  s.epilogue = act_ == ActKind::kRelu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  s.bias = bias_;
  pl->epilogue = pl->gemm.init(lt, s, ws_bytes);
  if (!pl->epilogue) {
    GemmSpec c;  // D^T = col^T W^T, column-major: the same memory, bias added afterwards
    c.batch = static_cast<int>(images);
    c.m = P, c.n = F, c.k = K;
    c.lda = P, c.stride_a = K * P;
    c.ldb = K, c.stride_b = 0;
    c.ldd = P, c.stride_d = F * P;
    if (!pl->gemm.init(lt, c, ws_bytes))
      throw Error("im2col convolution: cuBLASLt has no FP32 algorithm for a " + std::to_string(F) + "x" +
                  std::to_string(K) + " by " + std::to_string(K) + "x" + std::to_string(P) + " batched GEMM");
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
  const ColArgs a{static_cast<int>(p_.in_c),     static_cast<int>(p_.in_h),     static_cast<int>(p_.in_w),
                  static_cast<int>(p_.kernel_h), static_cast<int>(p_.kernel_w), static_cast<int>(p_.stride_h),
                  static_cast<int>(p_.stride_w), static_cast<int>(p_.pad_h),    static_cast<int>(p_.pad_w),
                  static_cast<int>(p_.out_h),    static_cast<int>(p_.out_w)};
  bool epilogue = true;
  for (int64_t i0 = 0; i0 < n; i0 += chunk) {
    const int64_t g = std::min(chunk, n - i0);
    const int64_t count = g * static_cast<int64_t>(per / sizeof(float));
    int64_t blocks = std::min<int64_t>((count + 255) / 256, 65536);
    im2col_kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(x + i0 * in_img, col, count, a);
    CUDA_CHECK_LAUNCH("im2col_kernel");
    Plan& pl = plan(lt, g, ws_bytes);
    epilogue = pl.epilogue;
    float* yc = y + i0 * out_img;
    if (pl.epilogue) {
      pl.gemm.run(lt, w, col, yc, ws, ws_bytes, s);
    } else {
      pl.gemm.run(lt, col, w, yc, ws, ws_bytes, s);
      launch_bias_act(yc, bias_, g, static_cast<int>(p_.filters), p_.out_h * p_.out_w, act_, s);
    }
  }
  last_epilogue_ = epilogue;
}

std::string Im2colConv::algo_name() const {
  return last_epilogue_ ? std::string("im2col+gemm(epilogue bias") + (act_ == ActKind::kRelu ? "+relu)" : ")")
                        : std::string("im2col+gemm+bias kernel");
}

}  // namespace cnnrun::gpu
