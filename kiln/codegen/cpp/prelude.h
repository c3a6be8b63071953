// kiln C++ kernel prelude: scalar types and the helpers generated kernels call.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
#include <omp.h>

// Set by a kernel that met an out-of-bounds index; the wrapper reads and clears it after the call.
static int kiln_error_flag = 0;
extern "C" int kiln_take_error() { return __atomic_exchange_n(&kiln_error_flag, 0, __ATOMIC_RELAXED); }
static inline int64_t kiln_indirect(int64_t i, int64_t size, bool wrap) {
  if (wrap && i < 0) i += size;
  if (i < 0 || i >= size) { __atomic_store_n(&kiln_error_flag, 1, __ATOMIC_RELAXED); return 0; }
  return i;
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
template <typename T> static inline T kiln_max(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (b > a || b != b) ? b : a;
  else return b > a ? b : a;
}
template <typename T> static inline T kiln_min(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (b < a || b != b) ? b : a;
  else return b < a ? b : a;
}
// OpenMP reductions for them; each private copy starts from the original value (max/min are idempotent)
#pragma omp declare reduction(kiln_max : float, double, int64_t, int32_t, int16_t, int8_t, uint8_t : \
    omp_out = kiln_max(omp_out, omp_in)) initializer(omp_priv = omp_orig)
#pragma omp declare reduction(kiln_min : float, double, int64_t, int32_t, int16_t, int8_t, uint8_t : \
    omp_out = kiln_min(omp_out, omp_in)) initializer(omp_priv = omp_orig)
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
    if (b == 0) return 0;
    T q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) q -= 1;
    return q;
  }
}
template <typename T> static inline T kiln_truncdiv(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::trunc(a / b);
  else return b == 0 ? 0 : a / b;
}
template <typename T> static inline T kiln_mod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    T m = std::fmod(a, b);
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
  } else {
    if (b == 0) return 0;
    T m = a % b;
    if (m != 0 && ((b < 0) != (m < 0))) m += b;
    return m;
  }
}
template <typename T> static inline T kiln_fmod(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return std::fmod(a, b);
  else return b == 0 ? 0 : a % b;
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
  else return a < 0 ? (T)-a : a;
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
