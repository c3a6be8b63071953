// kiln C++ kernel prelude: scalar types and the helpers generated kernels call.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <algorithm>
#include <type_traits>
#include <omp.h>

// Set by a kernel that met an out-of-bounds index; the wrapper reads and clears it after the call.
static int kiln_error_flag = 0;
extern "C" int kiln_take_error() { return __atomic_exchange_n(&kiln_error_flag, 0, __ATOMIC_RELAXED); }
static inline bool kiln_index_ok(int64_t i, int64_t size, bool wrap) {
  if (wrap && i < 0) i += size;
  return i >= 0 && i < size;
}
static inline int64_t kiln_indirect(int64_t i, int64_t size, bool wrap) {
  if (!kiln_index_ok(i, size, wrap)) { __atomic_store_n(&kiln_error_flag, 1, __ATOMIC_RELAXED); return 0; }
  return wrap && i < 0 ? i + size : i;
}
// glibc's vector math library (libmvec) has SIMD versions of these; declaring them lets `omp simd`
// loops call the vector versions (glibc declares them itself only under -ffast-math).
#if defined(__x86_64__) && defined(__GLIBC__) && defined(KILN_LIBMVEC)
extern "C" {
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
float sinf(float);
#pragma omp declare simd notinbranch
float cosf(float);
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
double sin(double);
#pragma omp declare simd notinbranch
double cos(double);
#if __GLIBC_PREREQ(2, 35)
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
float expm1f(float);
#pragma omp declare simd notinbranch
float log1pf(float);
#pragma omp declare simd notinbranch
float exp2f(float);
#pragma omp declare simd notinbranch
float log2f(float);
#pragma omp declare simd notinbranch
float log10f(float);
#pragma omp declare simd notinbranch
float tanf(float);
#pragma omp declare simd notinbranch
float atanf(float);
#pragma omp declare simd notinbranch
float asinf(float);
#pragma omp declare simd notinbranch
float acosf(float);
#pragma omp declare simd notinbranch
float sinhf(float);
#pragma omp declare simd notinbranch
float coshf(float);
#pragma omp declare simd notinbranch
float erfcf(float);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
double erf(double);
#pragma omp declare simd notinbranch
double expm1(double);
#pragma omp declare simd notinbranch
double log1p(double);
#endif
}
#endif

struct kiln_bf16 {
  uint16_t bits;
  kiln_bf16() = default;
  kiln_bf16(float f) {
    uint32_t u; std::memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) { bits = (uint16_t)((u >> 16) | 0x40); return; }  // NaN stays NaN
    u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even
    bits = (uint16_t)(u >> 16);
  }
  operator float() const { uint32_t u = (uint32_t)bits << 16; float f; std::memcpy(&f, &u, 4); return f; }
};

// max/min propagate NaN (as torch.maximum/amax do), written branch-free so that loops vectorize
// Integer add, sub, mul and neg of int32/int64 values wrap as eager's do (two's complement). In C++ a
// signed overflow is undefined: the optimizer may assume it does not happen (x0 * C with x0, C >= 0 was
// taken as >= 0 and a floor-mod's sign fix was dropped), so these go through the unsigned type.
template <typename T> static inline T kiln_wrap_add(T a, T b) { using U = std::make_unsigned_t<T>; return (T)((U)a + (U)b); }
template <typename T> static inline T kiln_wrap_sub(T a, T b) { using U = std::make_unsigned_t<T>; return (T)((U)a - (U)b); }
template <typename T> static inline T kiln_wrap_mul(T a, T b) { using U = std::make_unsigned_t<T>; return (T)((U)a * (U)b); }
template <typename T> static inline T kiln_wrap_neg(T a) { using U = std::make_unsigned_t<T>; return (T)((U)0 - (U)a); }
template <typename T> static inline T kiln_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (b > a || b != b) ? b : a;
  else return b > a ? b : a;
}
template <typename T> static inline T kiln_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (b < a || b != b) ? b : a;
  else return b < a ? b : a;
}
// logcumsumexp's step, ATen's _log_add_exp_helper exactly (equal infinities stay, NaN propagates)
template <typename T> static inline T kiln_log_add_exp(T x, T y) {
  T mn = std::isnan(y) ? y : std::min(x, y);
  T mx = std::isnan(y) ? y : std::max(x, y);
  if (mn != mx || std::isfinite(mn)) return std::log1p(std::exp(mn - mx)) + mx;
  return x;
}
// OpenMP reductions for them; each private copy starts from the original value (max/min are idempotent)
#pragma omp declare reduction(kiln_max : float, double, int64_t, int32_t, int16_t, int8_t, uint8_t : \
    omp_out = kiln_max(omp_out, omp_in)) initializer(omp_priv = omp_orig)
#pragma omp declare reduction(kiln_min : float, double, int64_t, int32_t, int16_t, int8_t, uint8_t : \
    omp_out = kiln_min(omp_out, omp_in)) initializer(omp_priv = omp_orig)
// Integer division by zero: eager's CPU kernels raise "ZeroDivisionError"; the kernel sets the error flag
// (2) and the wrapper raises it (codegen/wrapper_runtime.kernel_error).
static inline int kiln_zero_division() { __atomic_store_n(&kiln_error_flag, 2, __ATOMIC_RELAXED); return 0; }
template <typename T> static inline T kiln_floordiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    if (b == 0) return a / b;
    T mod = std::fmod(a, b);
    T div = (a - mod) / b;
    if (mod != 0 && ((b < 0) != (mod < 0))) div -= 1;
    T fl;
    if (div != 0) { fl = std::floor(div); if (div - fl > (T)0.5) fl += 1; }
    else fl = std::copysign((T)0, a / b);
    return fl;
  } else {
    if (b == 0) return (T)kiln_zero_division();
    if constexpr (std::is_signed_v<T>) { if (b == (T)-1) return kiln_wrap_neg(a); }  // (MIN / -1 traps in C)
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
  }
}
template <typename T> static inline T kiln_truncdiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::trunc(a / b);
  else if constexpr (std::is_signed_v<T>) {
    return b == 0 ? (T)kiln_zero_division() : (b == (T)-1 ? kiln_wrap_neg(a) : a / b);  // (MIN / -1 traps in C)
  } else return b == 0 ? (T)kiln_zero_division() : a / b;
}
template <typename T> static inline T kiln_mod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T m = std::fmod(a, b);
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
  } else {
    if (b == 0) return (T)kiln_zero_division();
    if constexpr (std::is_signed_v<T>) { if (b == (T)-1) return (T)0; }  // (MIN % -1 traps in C)
    T m = a % b;
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
  }
}
template <typename T> static inline T kiln_fmod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
  else return b == 0 ? (T)kiln_zero_division() : (b == (T)-1 ? (T)0 : a % b);  // (MIN % -1 traps in C)
}
template <typename T> static inline T kiln_pow(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::pow(a, b);
  else {
    if (b < 0) return a == 1 ? 1 : (a == -1 ? ((b & 1) ? -1 : 1) : 0);
    T r = 1;
    while (b) { if (b & 1) r *= a; a *= a; b >>= 1; }
    return r;
  }
}
template <typename T> static inline T kiln_lshift(T a, T b) {
  using U = std::make_unsigned_t<T>;
  if (b < 0 || b >= (T)(sizeof(T) * 8)) return 0;
  return (T)((U)a << b);
}
template <typename T> static inline T kiln_rshift(T a, T b) {
  if (b < 0 || b >= (T)(sizeof(T) * 8)) return a < 0 ? (T)-1 : (T)0;
  return a >> b;
}
template <typename T> static inline T kiln_sign(T a) {
  if constexpr (std::is_floating_point_v<T>) { if (a != a) return 0; }
  return (T)((T(0) < a) - (a < T(0)));
}
template <typename T> static inline T kiln_sigmoid(T a) { return T(1) / (T(1) + std::exp(-a)); }
template <typename T> static inline T kiln_relu(T a) { return a < T(0) ? T(0) : a; }
template <typename T> static inline T kiln_abs(T a) {
  if constexpr (std::is_floating_point_v<T>) return std::abs(a);
  else if constexpr (std::is_same_v<T, bool>) return a;
  else return a < 0 ? kiln_wrap_neg(a) : a;
}
// erfinv: a rational first guess refined by two Newton steps on erf (in double).
static inline double kiln_erfinv_d(double y) {
  if (y != y || y < -1.0 || y > 1.0) return std::numeric_limits<double>::quiet_NaN();
  if (y == 1.0) return std::numeric_limits<double>::infinity();
  if (y == -1.0) return -std::numeric_limits<double>::infinity();
  const double a[4] = {0.886226899, -1.645349621, 0.914624893, -0.140543331};
  const double b[4] = {-2.118377725, 1.442710462, -0.329097515, 0.012229801};
  const double c[4] = {-1.970840454, -1.624906493, 3.429567803, 1.641345311};
  const double d[2] = {3.543889200, 1.637067800};
  double x, ay = std::fabs(y);
  if (ay <= 0.7) {
    double z = y * y;
    double num = ((a[3] * z + a[2]) * z + a[1]) * z + a[0];
    double den = (((b[3] * z + b[2]) * z + b[1]) * z + b[0]) * z + 1.0;
    x = y * num / den;
  } else {
    double z = std::sqrt(-std::log((1.0 - ay) / 2.0));
    double num = ((c[3] * z + c[2]) * z + c[1]) * z + c[0];
    double den = (d[1] * z + d[0]) * z + 1.0;
    x = std::copysign(num, y) / den;
  }
  const double two_over_sqrt_pi = 1.1283791670955126;
  x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
}
template <typename T> static inline T kiln_erfinv(T y) { return static_cast<T>(kiln_erfinv_d(static_cast<double>(y))); }

// ---- float32 erf and tanh, branch-free so that `omp simd` loops vectorize them (both sides of each
// split are computed and one is selected). Polynomials are kiln's own minimax fits (float
// coefficients); max error about 1 ulp over all floats (tests/codegen/test_cpp_math.py), where glibc's
// vector erff/tanhf are 4 and 1.4 ulp. double keeps the C library's functions.
static inline float kiln_poly(float, float c0) { return c0; }
template <typename... C> static inline float kiln_poly(float x, float c0, C... cs) {
  return std::fma(kiln_poly(x, cs...), x, c0);  // Horner: c0 + x * (c1 + x * (...))
}
static inline float kiln_pow2i(int32_t k) {  // 2^k for -126 <= k <= 127
  int32_t bits = (k + 127) << 23;
  float f; std::memcpy(&f, &bits, 4); return f;
}
// x = k ln2 + r with |r| <= ln2/2 (a little more from rounding x * log2(e)); returns k
static inline float kiln_exp_reduce(float x, float& r) {
  float k = std::nearbyint(x * 0x1.715476p+0f);
  r = std::fma(k, -0x1.62e430p-1f, x);  // ln2 = 0x1.62e430p-1 - 0x1.05c610p-29
  r = std::fma(k, 0x1.05c610p-29f, r);
  return k;
}
static inline float kiln_expm1_reduced(float r) {  // e^r - 1 for |r| <= ln2/2: r + r^2 P(r)
  return std::fma(r * r, kiln_poly(r, 0x1.fffffcp-2f, 0x1.555490p-3f, 0x1.5558f8p-5f, 0x1.123b0ep-7f, 0x1.6a2240p-10f), r);
}
static inline float kiln_erff(float x) {
  float a = std::fabs(x), u = x * x;
  // computed for |x|, signed at the end. |x| < 0.84375: |x| (2/sqrt(pi) + u Q(u)), 2/sqrt(pi) as a float pair
  float q = kiln_poly(u, -0x1.812746p-2f, 0x1.ce2ec4p-4f, -0x1.b81f92p-6f, 0x1.557bc4p-8f, -0x1.b116b0p-11f, 0x1.75cb12p-14f);
  float small = std::fma(a, 0x1.20dd76p+0f, a * std::fma(u, q, -0x1.f7ac92p-25f));
  // 0.84375 <= |x| < 3.925: erfc = e^(-x^2) R(x), R a polynomial in x - 2.39; erf = 1 for |x| >= 3.925
  float ac = std::min(a, 3.925f);
  float R = kiln_poly(ac - 0x1.313334p+1f, 0x1.c20bc4p-3f, -0x1.498ab6p-4f, 0x1.c93c80p-6f, -0x1.2f1c2ap-7f,
                      0x1.8c11f4p-9f, -0x1.8c4d0ep-11f, 0x1.360f02p-12f, -0x1.8f58dap-13f, -0x1.7afdcap-14f,
                      -0x1.590fdcp-15f);
  float h = ac * ac, h_lo = std::fma(ac, ac, -h);  // x^2 = h + h_lo exactly: e^(-x^2) = e^(-h) (1 - h_lo)
  float r, k = kiln_exp_reduce(-h, r);
  float A = std::fma(-R, h_lo, R) * kiln_pow2i((int32_t)k);  // erfc = A (1 + expm1(r))
  float s = 1.0f - A, s_err = (1.0f - s) - A;  // 1 - A = s + s_err exactly
  float large = s + std::fma(-A, kiln_expm1_reduced(r), s_err);
  return std::copysign(a < 0x1.b00000p-1f ? small : large, x);  // NaN: large (NaN)
}
static inline float kiln_tanhf(float x) {
  float a = std::fabs(x), u = x * x;
  // computed for |x|, signed at the end. |x| < 1: |x| + |x|^3 Q(x^2)
  float q = kiln_poly(u, -0x1.555552p-2f, 0x1.11105ep-3f, -0x1.b9fbd8p-5f, 0x1.64ebc8p-6f, -0x1.19a506p-7f,
                      0x1.93845ap-9f, -0x1.b8ff36p-11f, 0x1.fd7b92p-14f);
  float small = std::fma(a * u, q, a);
  // |x| >= 1: 1 - 2t / (1 + t), t = e^(-2|x|); tanh = 1 for |x| >= 9.1
  float ac = std::min(a, 9.1f);
  float r, k = kiln_exp_reduce(-2.0f * ac, r);
  float t = (1.0f + kiln_expm1_reduced(r)) * kiln_pow2i((int32_t)k);
  float d = 1.0f + t, d_err = (1.0f - d) + t;  // 1 + t = d + d_err exactly
  float q2 = 2.0f * t / d;
  float large = 1.0f - std::fma(-q2, d_err, q2);
  return std::copysign(a < 1.0f ? small : large, x);  // NaN: large (NaN)
}
template <typename T> static inline T kiln_erf(T x) {
  if constexpr (std::is_same_v<T, float>) return kiln_erff(x);
  else return std::erf(x);
}
template <typename T> static inline T kiln_tanh(T x) {
  if constexpr (std::is_same_v<T, float>) return kiln_tanhf(x);
  else return std::tanh(x);
}
