// Writes nothing: relies on whatever the output buffer held before (a stale result from an
// earlier launch). Outputs are poisoned with NaN before every launch, so nothing is stale.
extern "C" __global__ void vector_add(const float* a, const float* b, float* c, int n) {
}
