// A __managed__ variable: refused by the build and the content check.
__device__ __managed__ int managed_total;
extern "C" __global__ void add_managed(int v) { atomicAdd(&managed_total, v); }
