// kiln C++ kernel prelude: scalar types and the helpers generated kernels call.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <algorithm>
#include <omp.h>

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
