// The harness's timing kernels (protocol-v2, "Timing"). Compiled with every other
// support/*.cu file into the support module; the harness looks them up by these names.

// Holds the stream while the host enqueues a batch of measured launches behind it, so the
// batch then runs back to back with no host enqueue gaps. Spins until *release becomes
// non-zero (the host writes it through pinned, device-mapped memory) or timeout_ns have passed
// on %globaltimer; in the latter case it sets *timed_out so the harness can report that the
// batch was not fully held. Launch with one block of one thread.
extern "C" __global__ void ko_spin(const volatile unsigned int* release,
                                   volatile unsigned int* timed_out,
                                   unsigned long long timeout_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  while (*release == 0u) {
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    if (now - start > timeout_ns) {
      *timed_out = 1u;
      __threadfence_system();
      return;
    }
  }
}

// Does nothing: measured like a candidate, it is the floor any measurement can show
// (launch_overhead_ms). Launch with one block of one thread.
extern "C" __global__ void ko_empty() {}

// The L2 flush before a timed launch (flush_l2), by reading: every 16 bytes of the scratch
// buffer (twice the L2) are loaded through L2 (ld.global.cg), so each line the cache held,
// dirty ones written back now, is replaced by a clean line of the scratch. A memset flush
// leaves dirty lines instead, which the timed kernel then pays to write back. `sink` is written
// only if the loads xor to a value the zeroed scratch never gives: the loads cannot be dropped.
// Launch with any grid (grid-stride loop).
extern "C" __global__ void ko_flush_l2(const uint4* scratch, unsigned long long words,
                                       unsigned int* sink) {
  unsigned int acc = 0u;
  const unsigned long long stride = static_cast<unsigned long long>(gridDim.x) * blockDim.x;
  for (unsigned long long i =
           static_cast<unsigned long long>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < words; i += stride) {
    const uint4 v = __ldcg(scratch + i);
    acc ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (acc == 0x7f3a9c21u) *sink = acc;
}
