// A CPU stand-in for libcublas.so used with the fake driver (fake_libcuda.cpp), whose "device"
// pointers are host memory. cublasSgemm_v2 checks its arguments the way cuBLAS documents
// (leading dimensions at least the rows of each column-major operand) and computes on the
// host, so the baseline op's call convention is tested without a GPU.
#include <cstdint>
#include <cstdio>

extern "C" {

struct FakeHandle {
  void* stream = nullptr;
  int math_mode = -1;
};

int cublasCreate_v2(FakeHandle** h) {
  *h = new FakeHandle;
  return 0;
}
int cublasDestroy_v2(FakeHandle* h) {
  delete h;
  return 0;
}
int cublasSetStream_v2(FakeHandle* h, void* stream) {
  h->stream = stream;
  return 0;
}
int cublasSetMathMode(FakeHandle* h, int mode) {
  h->math_mode = mode;
  return 0;
}
int cublasGetVersion_v2(FakeHandle*, int* v) {
  *v = 130100;
  return 0;
}
const char* cublasGetStatusString(int status) {
  return status == 7 ? "CUBLAS_STATUS_INVALID_VALUE" : "fake cuBLAS status";
}

// Column-major C[m,n] = alpha * A[m,k] B[k,n] + beta * C, no transposes.
int cublasSgemm_v2(FakeHandle* h, int ta, int tb, int m, int n, int k, const float* alpha,
                   const float* a, int lda, const float* b, int ldb, const float* beta, float* c,
                   int ldc) {
  if (h->stream == nullptr || h->math_mode != 0) return 7;  // expects a stream and default math
  if (ta != 0 || tb != 0 || m <= 0 || n <= 0 || k <= 0) return 7;
  if (lda < m || ldb < k || ldc < m) return 7;
  for (int j = 0; j < n; ++j) {
    for (int i = 0; i < m; ++i) {
      float sum = 0;
      for (int p = 0; p < k; ++p)
        sum +=
            a[i + static_cast<std::int64_t>(p) * lda] * b[p + static_cast<std::int64_t>(j) * ldb];
      float& out = c[i + static_cast<std::int64_t>(j) * ldc];
      out = *alpha * sum + (*beta == 0 ? 0.0f : *beta * out);
    }
  }
  return 0;
}

}  // extern "C"
