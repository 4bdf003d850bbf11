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
