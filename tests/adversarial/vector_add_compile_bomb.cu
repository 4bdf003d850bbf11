// A compile bomb: ~2^24 distinct template instantiations (depth only 24), each one a type the
// front end must create and keep: minutes of compile time and gigabytes of memory.
template <long L, long H> struct Sum {
    static constexpr long M = (L + H) / 2;
    static constexpr long value = Sum<L, M>::value + Sum<M + 1, H>::value;
};
template <long L> struct Sum<L, L> { static constexpr long value = L; };

extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) c[i] = a[i] + b[i] + (float)(Sum<0, (1L << 24)>::value & 1);
}
